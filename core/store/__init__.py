"""The DuckDB index and everything that reads it: results, samples, reviews, exports."""
