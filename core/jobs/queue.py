"""The queue: jobs wait their turn for the one engine of this machine.

One worker at a time holds the engine lock (``engine.lock`` in the jobs folder, an
``flock`` the kernel drops when the process dies). A submitted job is marked ``queued`` and
a worker is started; if another worker holds the lock, the new one exits at once and the
running worker takes the job when its current one ends. The next job is the queued one
with the highest priority, then the oldest. Keeping one worker means a model stays loaded
between jobs that use it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from core.jobs.engine_files import read_state
from core.jobs.engine_lock import EngineLock  # noqa: F401 (the queue's lock, imported from here)
from core.jobs.folder import JobFolder, JobUnreadable, list_jobs
from core.jobs.windows import RunWindows, WindowProblem, of_spec, waiting_message
from core.schemas import JobSpec

# How a queued job's status begins while the worker says why it cannot join the running
# jobs yet (core.run.running); Monitor shows that instead of the jobs ahead of it.
WAITS = "queued: waits "


def priority(job: JobFolder) -> int:
    """A job's queue priority (higher runs first), kept in its ``priority`` file."""
    try:
        return int((job.path / "priority").read_text())
    except (OSError, ValueError):
        return 0


def set_priority(job: JobFolder, value: int) -> None:
    (job.path / "priority").write_text(str(int(value)))


def queued_jobs(jobs_dir: Path) -> list[JobFolder]:
    """Queued jobs in the order they will run. Each job's files are parsed once while
    unchanged (:meth:`JobFolder.peek_status`): the worker scans on every admission and
    the pages on every rerun, and a thousand queued jobs of one owner must not make either
    slow for another."""
    waiting = []
    for job in list_jobs(jobs_dir):
        try:
            if job.peek_status().state == "queued":
                waiting.append((-priority(job), job.peek_spec().created_at, job))
        except JobUnreadable:  # that job's problem; the queue goes on
            continue
    return [job for *_, job in sorted(waiting, key=lambda w: w[:2])]


class Held:
    """Queued jobs outside their run windows at a moment: what waits, and until when."""

    def __init__(self, jobs: list[tuple[JobFolder, RunWindows]], at: datetime) -> None:
        self.jobs, self.at = jobs, at

    @property
    def ids(self) -> set[str]:
        return {job.job_id for job, _ in self.jobs}

    def next_opening(self) -> datetime | None:
        """When the first of them may start (None: none waits)."""
        return min((w.next_open(self.at) for _, w in self.jobs), default=None)

    def say_when(self) -> None:
        """Each held job's status says when it runs next (written only when it changes)."""
        for job, windows in self.jobs:
            with job.status_lock():
                status = job.read_status()
                message = waiting_message(windows, status, self.at)
                if status.state == "queued" and status.message != message:
                    status.message = message
                    job.write_status(status)


def past_completion(spec: JobSpec, at: datetime) -> bool:
    if not spec.completion_window_hours:
        return False
    created = datetime.fromisoformat(spec.created_at)
    created = created if created.tzinfo else created.replace(tzinfo=UTC)
    return at > created + timedelta(hours=spec.completion_window_hours)


def runnable_jobs(jobs_dir: Path, at: datetime) -> tuple[list[JobFolder], Held]:
    """The queued jobs that may start at ``at``, in the order they run, and those held
    outside their run windows. A job whose windows cannot be read runs (and its folder's
    problem is its own), as an unreadable job is taken to fail with its reason."""
    runnable, held = [], []
    for job in queued_jobs(jobs_dir):
        try:
            spec = job.peek_spec()
            windows = of_spec(spec)
        except (JobUnreadable, WindowProblem):
            windows = None
        # one past its completion window is taken too: the worker ends it expired
        if windows is None or windows.is_open(at) or past_completion(spec, at):
            runnable.append(job)
        else:
            held.append((job, windows))
    return runnable, Held(held, at)


def models_loaded(jobs_dir: Path) -> frozenset[str]:
    """Names of the models a live worker holds now (the resident worker's, and those of
    jobs running): a job on one of them runs without loading it again."""
    state = read_state(jobs_dir.parent)
    names = {m.name for m in state.models} if state is not None else set()
    for job in list_jobs(jobs_dir):
        try:
            status = job.peek_status()
            if status.state in ("loading", "running", "cancelling") and not status.interrupted:
                names.add(Path(job.peek_spec().engine.model).name)
        except JobUnreadable:
            continue
    return frozenset(names)


def position(job: JobFolder, jobs_dir: Path) -> int | None:
    """1 for the next job to run; None when the job is not waiting."""
    order = [j.job_id for j in queued_jobs(jobs_dir)]
    return order.index(job.job_id) + 1 if job.job_id in order else None


def ahead_of(job: JobFolder, jobs_dir: Path) -> list[str]:
    """The ids of the jobs a queued job waits for, in the order they run: the one running
    now, then those queued before it (none for a job that is not queued)."""
    order = [j.job_id for j in queued_jobs(jobs_dir)]
    if job.job_id not in order:
        return []
    running = []
    for other in list_jobs(jobs_dir):
        try:
            status = other.peek_status()
        except JobUnreadable:
            continue
        if status.state in ("loading", "running", "cancelling") and not status.interrupted:
            running.append(other.job_id)
    return running + order[: order.index(job.job_id)]
