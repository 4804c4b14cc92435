"""Jobs whose worker died: queued again by themselves, once; failed when they do it again.

A worker killed mid-job (``kill -9``, the machine's OOM killer, a reboot) leaves its job in
``loading``, ``running`` or ``cancelling`` with a dead pid: it reads ``interrupted``. The
next worker to hold the engine (:func:`requeue_interrupted`, called from
``core.run.worker.serve``) queues such a job again, and it resumes where its results end. A
job interrupted again after that is failed with the reason instead: a job that kills its
worker (a request that takes all memory) must not kill every worker after it. A person's
Resume gives it another chance (``core.jobs.folder.start_worker`` clears the count).

Nothing resumes a job while no worker runs, so the studio's server wakes one
(:func:`wake_worker`) when it finds an interrupted job: the jobs watcher of the UI process
looks every few seconds, and the Batch API when a client reads such a batch.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from core.jobs.engine_files import start_resident
from core.jobs.engine_lock import EngineLock
from core.jobs.folder import JobFolder, JobUnreadable, list_jobs, mark_queue_changed
from core.schemas import JobStatus, now_iso

log = logging.getLogger(__name__)

AUTO_RESUMES = 1  # times a job is queued again by itself before it fails
RESUMED = "resumed by itself: its worker stopped while it ran"


# status.json's mtime of jobs seen ended: not read again until it changes (a Resume), so a
# look every few seconds over thousands of jobs costs a stat each.
_ended: dict[Path, int] = {}


def interrupted_jobs(jobs_dir: Path) -> list[JobFolder]:
    """Jobs whose worker died while they ran (see ``JobStatus.interrupted``)."""
    found = []
    for job in list_jobs(jobs_dir):
        try:
            stamp = job.status_file.stat().st_mtime_ns
            if _ended.get(job.path) == stamp:
                continue
            status = job.read_status()
        except (OSError, JobUnreadable):  # that job's problem; the others are looked at
            continue
        if status.is_final:
            _ended[job.path] = stamp
        elif status.interrupted:
            found.append(job)
    return found


def resumes_by_itself(status: JobStatus) -> bool:
    """An interrupted job that the next worker queues again (not yet resumed so)."""
    return status.interrupted and status.interruptions < AUTO_RESUMES


def interrupted_message(interruptions: int) -> str:
    """What an interrupted job waits for, as the Batch API and the pages say it."""
    if interruptions < AUTO_RESUMES:
        return "its worker stopped; the job resumes by itself when a worker starts"
    return "its worker stopped again; the job fails when a worker starts (Resume retries it)"


def requeue_interrupted(jobs_dir: Path) -> list[str]:
    """Queues each interrupted job again (once), or fails it when it was already resumed
    so; returns the ids queued. Call only while holding the engine lock: then no other
    worker runs, and a job in a running state with a dead pid is truly interrupted."""
    queued = []
    for job in interrupted_jobs(jobs_dir):
        with job.status_lock():
            status = job.read_status()
            if not status.interrupted:  # a cancel or a Resume got there first
                continue
            pid = status.pid
            if status.interruptions < AUTO_RESUMES:
                status.enter("queued", RESUMED)
                status.note(f"{RESUMED} (pid {pid}); the requests without a result run")
                status.interruptions += 1
                status.pid = None
                queued.append(job.job_id)
            else:
                reason = (
                    f"its worker stopped while running it {status.interruptions + 1} times "
                    "(killed, or out of memory?): the job is not resumed by itself again"
                )
                status.enter("failed", f"{reason}; Resume runs the requests left")
                status.error, status.finished_at = reason, now_iso()
            job.write_status(status)
        log.warning("job %s: %s", job.job_id, status.message)
    if queued:
        mark_queue_changed(jobs_dir)
    return queued


_woken: dict[Path, float] = {}
_woken_lock = threading.Lock()
WAKE_EVERY_SECONDS = 10.0


def wake_worker(jobs_dir: Path) -> bool:
    """Starts a worker for the queue (``--resident JOBS_DIR``) when jobs are interrupted
    and no worker holds the engine; it queues them again and runs them. At most once per
    ``WAKE_EVERY_SECONDS`` per jobs folder in a process. True when one was started."""
    now = time.monotonic()
    with _woken_lock:
        if now - _woken.get(jobs_dir, -WAKE_EVERY_SECONDS) < WAKE_EVERY_SECONDS:
            return False
        _woken[jobs_dir] = now
    if EngineLock(jobs_dir).holder() is not None or not interrupted_jobs(jobs_dir):
        return False
    log.warning("interrupted jobs in %s: starting a worker to resume them", jobs_dir)
    start_resident(jobs_dir.parent)
    return True


class Recovery(threading.Thread):
    """The UI process's look for interrupted jobs, every ``WAKE_EVERY_SECONDS``: wakes a
    worker when it finds one (:func:`wake_worker`). Stopped like the watchers' observers."""

    def __init__(self, jobs_dir: Path) -> None:
        super().__init__(name="recovery", daemon=True)
        self.jobs_dir = jobs_dir
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(WAKE_EVERY_SECONDS):
            try:
                wake_worker(self.jobs_dir)
            except Exception:  # a look that failed: the next one tries again
                log.warning("looking for interrupted jobs failed", exc_info=True)

    def stop(self) -> None:
        self._stop_event.set()
