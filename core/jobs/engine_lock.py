"""The machine's one engine: an ``flock`` on ``engine.lock`` in the jobs folder, held by one
worker at a time (the kernel drops it when that process dies). See :mod:`core.jobs.queue`."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import IO

from core.schemas import worker_alive

LOCK_NAME = "engine.lock"
# How long a worker waits for the lock of a killed one: the kernel drops it only once the
# dead process's memory is freed (seconds, for a worker that held models).
DEAD_HOLDER_SECONDS = 30.0

_held: set[EngineLock] = set()  # the locks this process holds


def _forget_in_child() -> None:
    """A forked child (an engine's helper process) closes its copy of a held lock file:
    the lock belongs to the open file, so the copy would keep the engine taken after its
    worker was killed, and the next worker would find it held by nobody alive."""
    for lock in _held:
        if lock._handle is not None:
            lock._handle.close()  # closing a copy drops nothing: the parent keeps the lock
            lock._handle = None
    _held.clear()


os.register_at_fork(after_in_child=_forget_in_child)


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
        _held.add(self)
        return True

    def acquire_from_the_dead(self, seconds: float = DEAD_HOLDER_SECONDS) -> bool:
        """Takes the lock, waiting while its holder is dead but not yet gone (killed with
        -9: its process still frees its memory); False at once when a live worker holds it."""
        deadline = time.monotonic() + seconds
        while True:
            if self.acquire():
                return True
            if not self._holder_dead() or time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
        _held.discard(self)

    def holder(self) -> int | None:
        """PID of the live worker holding the lock; None when nobody holds it or its holder
        is dead (the lock goes with its process, and a worker started now waits for that:
        :meth:`acquire_from_the_dead`)."""
        if self._handle is not None:
            return os.getpid()
        probe = EngineLock(self.path.parent)
        if probe.acquire():
            probe.release()
            return None
        pid = self._recorded_pid()
        return pid if pid is not None and worker_alive(pid) else None

    def _holder_dead(self) -> bool:
        pid = self._recorded_pid()
        return pid is not None and not worker_alive(pid)

    def _recorded_pid(self) -> int | None:
        try:
            return int(self.path.read_text() or 0) or None
        except (OSError, ValueError):
            return None
