"""Automatic QA: rules (checks) run over every result of jobs, graded inside DuckDB."""
