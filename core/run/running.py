"""The jobs a worker runs side by side: one thread each, admitted by the main thread.

Every running job on a loaded model feeds the same engine (:mod:`core.run.feed`), which
shares it by weight. The worker's main thread keeps what must stay in one thread: the
signals, the queue, the admission of jobs and every model load (:class:`~core.run.pool.Loads`).
A queued job is admitted (:meth:`Running.waits_for` says why not) while fewer than the
most side by side run (Settings, :func:`~core.jobs.engine_files.running_jobs_cap`), and
when each model it names is loaded or fits beside the engines the running jobs use (the
pool's memory rule; an engine in use is never unloaded for it). A Ray job runs alone.

A cancel names its job by a file in the job's folder (``core.jobs.folder.cancel`` writes it,
then signals the worker); the signal handler only notes the signal (``StopRequest.sink``),
and the main thread stops the jobs whose file it finds (:meth:`Running.take_signals`), each
through a StopRequest of its own: the others run on. SIGTERM stops them all and the worker
exits (one during a model load ends the load at once: :meth:`Running.on_signal`); a SIGINT
that names no job (Ctrl-C) stops them all at once, as it stops the one job of a worker
running them in turn.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from core.jobs.folder import CANCEL_SIGNAL, JobFolder, JobUnreadable
from core.jobs.queue import WAITS
from core.run.pool import POOL
from core.run.progress import plural
from core.run.stopping import Cancelled, StopRequest
from core.schemas import JobSpec, JobStatus

log = logging.getLogger("core.run.worker")
JOB_THREAD = "job "  # a job's thread is named this and its id


def engine_folders(spec: JobSpec) -> list[str]:
    """The model folders whose engines a job may load (an adapter's base for an adapter)."""
    folders = [spec.engine.model, *(spec.engine_folder(f) for f in spec.model_map.values())]
    if spec.embedding_model:
        folders.append(spec.embedding_model)
    return list(dict.fromkeys(folders))


class JobLog(logging.Handler):
    """A job's ``logging`` records into its own ``worker.log``: only those of its thread
    (the engine's own output, from its processes, stays in the worker's log)."""

    def __init__(self, path: Path, thread_name: str) -> None:
        super().__init__()
        self.path, self.thread_name = path, thread_name
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName == self.thread_name

    def emit(self, record: logging.LogRecord) -> None:
        try:
            with self.path.open("a", encoding="utf-8") as out:
                out.write(self.format(record) + "\n")
        except OSError:  # a job folder gone or a full disk: the worker's log still has it
            pass


def _not_a_jobs(record: logging.LogRecord) -> bool:
    return not record.threadName.startswith(JOB_THREAD)


@contextmanager
def own_logs() -> Iterator[None]:
    """While jobs run side by side, the worker's own log handlers leave each job's records
    to its :class:`JobLog` (the worker's output is the log of the job it was started for)."""
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(_not_a_jobs)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(_not_a_jobs)


@dataclass
class RunningJob:
    job: JobFolder
    spec: JobSpec | None  # None: its spec cannot be read (it fails alone, with the reason)
    stop: StopRequest
    thread: threading.Thread
    status: JobStatus | None = None  # its final status, once its thread ends
    stopped_by: set[str] = field(default_factory=set)  # the cancel files it answered


class Running:
    """The jobs running now, each in its thread (see the module doc). ``run`` runs one job
    to its end in the calling thread (``core.run.worker._run_queued``)."""

    def __init__(self, run: Callable[[JobFolder, StopRequest], JobStatus]) -> None:
        self.run = run
        self.jobs: dict[str, RunningJob] = {}
        self.signals: list[int] = []  # noted by the signal handler, taken by the main thread

    @property
    def ids(self) -> list[str]:
        return list(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)

    def waits_for(self, job: JobFolder, spec: JobSpec | None, cap: int) -> str | None:
        """Why a queued job cannot start beside the running ones now (None: it can)."""
        if not self.jobs:
            return None
        names = ", ".join(self.jobs)
        if len(self.jobs) >= cap:
            return f"{WAITS}for a free place beside {names} (at most {cap} at once)"
        ray = [r.job.job_id for r in self.jobs.values() if r.spec is not None and r.spec.ray]
        if ray:
            return f"{WAITS}for {', '.join(ray)}, which runs on a Ray cluster alone"
        if spec is None:
            return None
        if spec.ray:
            return f"{WAITS}to run on a Ray cluster alone, after {names}"
        for folder in engine_folders(spec):
            config = spec.engine.model_copy(update={"model": folder})
            if any(c.model == folder for c in POOL.held) or POOL.can_load(config):
                continue
            return (
                f"{WAITS}{POOL.memory_wait(config, self.job_of())}; it starts when one of them ends"
            )
        return None

    def job_of(self) -> dict[Hashable, str]:
        """Each running job's id by its thread (an engine's users)."""
        return {r.thread.ident: i for i, r in list(self.jobs.items())}

    def start(self, job: JobFolder, spec: JobSpec | None) -> None:
        """Runs the job in a thread of its own, its log records to its ``worker.log``."""
        stop = StopRequest()
        name = f"{JOB_THREAD}{job.job_id}"
        handler = JobLog(job.log_file, name)

        def run() -> None:
            logging.getLogger().addHandler(handler)
            try:
                self.jobs[job.job_id].status = self.run(job, stop)
            except BaseException:
                log.exception("job %s: its thread ended on an error", job.job_id)
            finally:
                logging.getLogger().removeHandler(handler)

        thread = threading.Thread(target=run, name=name, daemon=True)
        self.jobs[job.job_id] = RunningJob(job, spec, stop, thread)
        thread.start()

    def reap(self) -> list[tuple[JobFolder, JobStatus | None]]:
        """The jobs whose thread has ended, with their final status; their engines are free
        to unload again."""
        ended = []
        for job_id, running in list(self.jobs.items()):
            if not running.thread.is_alive():
                running.thread.join()
                POOL.release(running.thread.ident)
                del self.jobs[job_id]
                ended.append((running.job, running.status))
        return ended

    def on_signal(self, signum: int) -> None:
        """The signal handler's sink: only notes it (it runs between two bytecodes), but for
        a SIGTERM while the main thread loads a model (the worker exits: a load can take
        minutes): that ends the load at once (the worker then stops every job, as
        ``core.run.worker._serve_side_by_side`` does on its way out)."""
        self.signals.append(signum)
        if signum == signal.SIGTERM and POOL.loads is not None and POOL.loads.loading:
            raise Cancelled(signal.Signals(signum).name)

    def take_signals(self) -> bool:
        """Stops the jobs the signals noted since meant (each cancelled job alone; all on
        SIGTERM or a Ctrl-C); True when the worker is to exit once they have stopped."""
        leaving = False
        while self.signals:
            signum = self.signals.pop(0)
            named = [r for r in self.jobs.values() if _cancel_asked(r)]
            for running in named:
                self._stop(running)
            if signum == signal.SIGTERM:
                leaving = True
                self.stop_all(leaving=True)
            elif signum == signal.SIGINT and not named:
                self.stop_all()  # Ctrl-C in the worker's terminal
            elif signum == CANCEL_SIGNAL and not named:
                log.info("a cancel came for a job this worker no longer runs")
        return leaving

    def _stop(self, running: RunningJob, leaving: bool = False) -> None:
        running.stop.ask(leaving)
        if POOL.loads is not None and running.thread.ident is not None:  # waits for a model
            POOL.loads.withdraw(running.thread.ident, Cancelled("cancelled while it waited"))

    def stop_all(self, leaving: bool = False) -> None:
        for running in self.jobs.values():
            self._stop(running, leaving)

    def join(self, timeout: float | None = None) -> None:
        for running in list(self.jobs.values()):
            running.thread.join(timeout)

    def describe(self) -> str:
        return plural(len(self.jobs), "job") + " running: " + ", ".join(self.jobs)


def _cancel_asked(running: RunningJob) -> bool:
    """Whether the job's folder holds a cancel not yet answered (a second one, ``now``,
    is answered again: the stop is asked once more)."""
    try:
        asked = running.job.cancel_file.read_text().strip()
    except OSError:
        return False
    try:
        key = f"{asked}@{running.job.cancel_file.stat().st_mtime_ns}"
    except OSError:
        return False
    if key in running.stopped_by:
        return False
    running.stopped_by.add(key)
    return True


def say_waiting(job: JobFolder, message: str) -> None:
    """A queued job's status says why it waits (written only when that changes)."""
    with job.status_lock():
        try:
            status = job.read_status()
        except JobUnreadable:
            return
        if status.state == "queued" and status.message != message:
            status.message = message
            job.write_status(status)
