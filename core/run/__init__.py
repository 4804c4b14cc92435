"""Running jobs: the worker, the engine, the local and Ray executors, output lines."""
