"""Batch Studio's logic: batch files, jobs, the worker, the engine, the store and the CLI."""

__version__ = "0.1.0"
