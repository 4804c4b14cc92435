"""Background watchers of the UI process: the inbox, and job folders to ingest.

Both use watchdog. The jobs watcher ingests a job into DuckDB when its result or status
files or its name (a rename's ``name.txt``) change, at most once a second per job, so pages
read fresh results without each page polling the folders.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from core.config import DataPaths
from core.jobs.folder import JobFolder, JobUnreadable
from core.jobs.inbox import watch_inbox
from core.store.db import Store

WATCHED_FILES = ("output.jsonl", "errors.jsonl", "status.json", "name.txt")
MIN_INTERVAL_SECONDS = 1.0


class _JobsHandler(FileSystemEventHandler):
    def __init__(self, store: Store, jobs_dir: Path) -> None:
        self.store, self.jobs_dir = store, jobs_dir
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def _changed(self, path: Path) -> None:
        if path.name not in WATCHED_FILES or path.parent.parent != self.jobs_dir:
            return
        job = JobFolder(path.parent)
        with self._lock:
            if time.monotonic() - self._last.get(job.job_id, 0) < MIN_INTERVAL_SECONDS:
                return
            self._last[job.job_id] = time.monotonic()
        if job.spec_file.exists():
            try:
                self.store.ingest(job)
            except JobUnreadable as exc:  # that job's problem: the watcher goes on
                self.store.unreadable[job.job_id] = exc.reason

    def on_modified(self, event: FileSystemEvent) -> None:
        if not event.is_directory:
            self._changed(Path(str(event.src_path)))

    def on_moved(self, event: FileSystemEvent) -> None:  # status.json is replaced by rename
        if not event.is_directory:
            self._changed(Path(str(event.dest_path)))


def start_watchers(paths: DataPaths, store: Store) -> list[Observer]:
    """Starts the inbox and jobs watchers; returns their observers (daemon threads)."""
    jobs = Observer()
    jobs.schedule(_JobsHandler(store, paths.jobs), str(paths.jobs), recursive=True)
    jobs.daemon = True
    jobs.start()
    return [watch_inbox(paths), jobs]
