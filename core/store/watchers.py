"""Background watchers of the UI process: the inbox, and job folders to ingest.

Both use watchdog; a third thread wakes a worker for jobs a dead one left
(``core.jobs.recovery``). The jobs watcher ingests a job into DuckDB when its result or status
files or its name (a rename's ``name.txt``) change, at most once a second per job, so pages
read fresh results without each page polling the folders; it also reads the new lines into
the job's ledger kept in memory (``core.jobs.ledger.summary``), as a thread does for the
newest jobs when the watchers start, and hands the job on (``after_ingest``: the UI grades its
checks there, in the background).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from core.config import DataPaths
from core.jobs.folder import JobFolder, JobUnreadable, list_jobs
from core.jobs.inbox import watch_inbox
from core.jobs.ledger import READERS_KEPT, summary
from core.jobs.output_file import CorruptLine
from core.jobs.recovery import Recovery
from core.store.db import Store

log = logging.getLogger(__name__)

WATCHED_FILES = ("output.jsonl", "errors.jsonl", "status.json", "name.txt")
MIN_INTERVAL_SECONDS = 1.0


class _JobsHandler(FileSystemEventHandler):
    """Ingests a job whose files changed, at most once a second per job; a change inside
    that second is ingested when it ends (never dropped: a job's last status may be it)."""

    def __init__(
        self, store: Store, jobs_dir: Path, after_ingest: Callable[[str], object] | None = None
    ) -> None:
        self.store, self.jobs_dir, self.after_ingest = store, jobs_dir, after_ingest
        self._last: dict[str, float] = {}
        self._waiting: set[str] = set()
        self._lock = threading.Lock()
        self._ingesting = threading.Lock()  # one ingest at a time: they share offsets

    def _changed(self, path: Path) -> None:
        if path.name not in WATCHED_FILES or path.parent.parent != self.jobs_dir:
            return
        job = JobFolder(path.parent)
        with self._lock:
            if job.job_id in self._waiting:
                return  # an ingest is already due: it will read this change too
            wait = self._last.get(job.job_id, -MIN_INTERVAL_SECONDS) + MIN_INTERVAL_SECONDS
            wait -= time.monotonic()
            self._waiting.add(job.job_id)
        if wait > 0:
            timer = threading.Timer(wait, self._ingest, [job])
            timer.daemon = True
            timer.start()
        else:
            self._ingest(job)

    def _ingest(self, job: JobFolder) -> None:
        with self._lock:
            self._waiting.discard(job.job_id)
            self._last[job.job_id] = time.monotonic()
        if not job.spec_file.exists():
            return
        with self._ingesting:
            if self.store.closed:  # a change due after the app closed its store
                return
            try:
                self.store.ingest(job)
                warm_ledger(job)
            except JobUnreadable as exc:  # that job's problem: the watcher goes on
                self.store.unreadable[job.job_id] = exc.reason
                return
            except Exception:
                if self.store.closed:  # the app closed its store during this ingest
                    return
                raise
        if self.after_ingest is not None:
            try:
                self.after_ingest(job.job_id)
            except Exception:  # the watcher goes on; the pages do it again
                log.warning("after the ingest of %s", job.job_id, exc_info=True)

    def on_modified(self, event: FileSystemEvent) -> None:
        if not event.is_directory:
            self._changed(Path(str(event.src_path)))

    def on_moved(self, event: FileSystemEvent) -> None:  # status.json is replaced by rename
        if not event.is_directory:
            self._changed(Path(str(event.dest_path)))


def warm_ledger(job: JobFolder) -> None:
    """Reads the job's new result lines into the ledger kept in memory, here in the
    background, so the page that shows it next has nothing left to read."""
    try:
        summary(job, job.read_spec().shard_size)
    except (JobUnreadable, OSError, CorruptLine) as exc:  # the page that reads it says why
        log.warning("ledger of %s not read ahead: %s", job.job_id, exc)


def stop_watchers(observers: list[Observer | Recovery]) -> None:
    """Stops what :func:`start_watchers` started and releases its inotify instances."""
    for observer in observers:
        observer.stop()
    for observer in observers:
        observer.join(timeout=5)


def start_watchers(
    paths: DataPaths, store: Store, after_ingest: Callable[[str], object] | None = None
) -> list[Observer | Recovery]:
    """Starts the inbox and jobs watchers and the look for interrupted jobs
    (:class:`core.jobs.recovery.Recovery`); returns them (daemon threads).
    ``after_ingest`` is called with a job's id after each ingest of it (the UI brings the
    job's checks up to date there, so a page finds them graded)."""
    jobs = Observer()
    handler = _JobsHandler(store, paths.jobs, after_ingest)
    jobs.schedule(handler, str(paths.jobs), recursive=True)
    jobs.daemon = True
    jobs.start()
    newest = list_jobs(paths.jobs)[:READERS_KEPT]  # what Jobs and Monitor show first
    threading.Thread(target=lambda: [warm_ledger(j) for j in newest], daemon=True).start()
    recovery = Recovery(paths.jobs)  # a worker woken for jobs a dead one left
    recovery.start()
    return [watch_inbox(paths), jobs, recovery]
