"""Planning a job before it runs: the builder, the estimate, the price table."""
