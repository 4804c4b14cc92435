"""What people make (review labels, A/B preferences, samples), kept in append-only files."""
