"""The hot folder: a batch file dropped into the inbox becomes a queued job, or is refused.

A valid file is moved into a new job folder's ``input.jsonl`` and queued for the engine.
A file with invalid lines (or none) is moved to ``inbox/rejected/`` with its check report
written beside it as ``<name>.report.json``. Files are taken only once their size has
stopped changing, so a file still being copied is never read half-way.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from core.config import DataPaths
from core.files import odd_entry, write_json_atomic
from core.jobs.folder import JobFolder
from core.jobs.submit import Refused, Submission, submit
from core.model_folders import prepare_default_model
from core.model_names import studio_model_map
from core.schemas import EngineConfig

log = logging.getLogger(__name__)
SETTLE_SECONDS = 1.0
PATTERNS = (".jsonl",)


def _settled(path: Path, seconds: float = SETTLE_SECONDS) -> bool:
    """Waits until the file's size stops changing; False if it vanished."""
    try:
        size = path.lstat().st_size  # a link's own size: what it points to is never read
        while True:
            time.sleep(seconds)
            now = path.lstat().st_size
            if now == size:
                return True
            size = now
    except FileNotFoundError:
        return False


def server_file(typed: str, inbox: Path) -> Path:
    """The file a path typed on Upload & check names: a relative path is the inbox's file of
    that name where there is one, else the path as given (``~`` expanded)."""
    candidate = Path(typed).expanduser()
    if not candidate.is_absolute() and (inbox / candidate).is_file():
        return inbox / candidate
    return candidate


def process_file(path: Path, paths: DataPaths, model: str | None = None) -> JobFolder | None:
    """Submits one dropped file as a job, or moves it aside with the reasons it was refused.

    Returns the new job, or None when the file was refused.
    """
    odd = odd_entry(path)
    if odd is not None:  # never opened: a FIFO would block the watcher, a link lead out
        _reject(path, paths, {"refused": [odd]})
        log.info("inbox: %s refused: %s", path.name, odd)
        return None
    folder = model or str(prepare_default_model())
    submission = Submission(
        engine=EngineConfig(model=folder),
        source=f"inbox/{path.name}",
        model_map=studio_model_map(paths.home),
    )
    try:
        job = submit(path, submission, paths.jobs).job
    except Refused as refused:
        summary = refused.report.to_dict() if refused.report is not None else {}
        summary["refused"] = refused.problems
        _reject(path, paths, summary)
        log.info("inbox: %s refused: %s", path.name, refused)
        return None
    path.unlink()
    log.info("inbox: %s queued as %s", path.name, job.job_id)
    return job


def _reject(path: Path, paths: DataPaths, report: dict) -> None:
    """Moves a refused file (a link or FIFO as itself: renamed, never read) into
    ``inbox/rejected/`` with its report beside it."""
    rejected = paths.inbox / "rejected"
    rejected.mkdir(parents=True, exist_ok=True)
    shutil.move(str(path), rejected / path.name)
    write_json_atomic(rejected / f"{path.name}.report.json", report)


def process_inbox(paths: DataPaths, model: str | None = None) -> list[JobFolder | None]:
    """Processes every file already waiting in the inbox (e.g. dropped while nobody watched)."""
    return [
        process_file(p, paths, model)
        for p in sorted(paths.inbox.iterdir())
        if p.suffix in PATTERNS and (p.is_symlink() or not p.is_dir())  # odd ones refused
    ]


class _InboxHandler(FileSystemEventHandler):
    def __init__(self, paths: DataPaths, model: str | None) -> None:
        self.paths, self.model = paths, model
        self._lock = threading.Lock()

    def _take(self, path: Path) -> None:
        if path.parent != self.paths.inbox or path.suffix not in PATTERNS:
            return
        if not _settled(path):
            return
        with self._lock:  # one file at a time: each job is created whole
            if os.path.lexists(path):  # a dangling link too: it is refused, not left
                try:
                    process_file(path, self.paths, self.model)
                except Exception:  # a bad file must not stop the watcher
                    log.exception("inbox: could not process %s", path)

    def on_created(self, event: FileSystemEvent) -> None:
        if not event.is_directory:
            self._take(Path(str(event.src_path)))

    def on_moved(self, event: FileSystemEvent) -> None:
        if not event.is_directory:
            self._take(Path(str(event.dest_path)))


def watch_inbox(paths: DataPaths, model: str | None = None) -> Observer:
    """Starts watching the inbox (after taking what is already there); returns the observer."""
    process_inbox(paths, model)
    observer = Observer()
    observer.schedule(_InboxHandler(paths, model), str(paths.inbox), recursive=False)
    observer.daemon = True
    observer.start()
    return observer
