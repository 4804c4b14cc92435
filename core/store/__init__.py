"""The DuckDB index and everything that reads it: results, samples, reviews, exports."""

# What each training-data export writes (the CLI's ``export --what`` choices and their one
# format, :mod:`core.store.training`). Here, so that the command line's parser lists them
# without loading pandas and DuckDB: every ``python -m core`` command builds that parser.
TRAINING_FORMATS = {"sft": "jsonl", "dpo": "jsonl", "dataset": "parquet"}
