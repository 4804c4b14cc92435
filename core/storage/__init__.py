"""Where a job's files come from and go to beyond the local disk (object storage)."""
