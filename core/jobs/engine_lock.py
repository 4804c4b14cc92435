"""The machine's one engine: an ``flock`` on ``engine.lock`` in the jobs folder, held by one
worker at a time (the kernel drops it when that process dies). See :mod:`core.jobs.queue`."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

LOCK_NAME = "engine.lock"


class EngineLock:
    """The machine's one engine, held by one worker process at a time."""

    def __init__(self, jobs_dir: Path) -> None:
        self.path = jobs_dir / LOCK_NAME
        self._handle: IO[str] | None = None

    def acquire(self) -> bool:
        """Takes the lock without waiting; False when another worker holds it."""
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._handle = handle
        return True

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    def holder(self) -> int | None:
        """PID of the worker holding the lock, if any."""
        if self._handle is not None:
            return os.getpid()
        probe = EngineLock(self.path.parent)
        if probe.acquire():
            probe.release()
            return None
        try:
            return int(self.path.read_text() or 0) or None
        except (OSError, ValueError):
            return None
