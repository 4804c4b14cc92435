"""``python -m core.run.worker JOB_DIR``: runs a job folder to the end, then the queue.

The worker loads the engine once and runs, in chunks, every request without a final
result. Each chunk's lines are appended durably (successes to ``output.jsonl``, failures
to ``errors.jsonl``) before ``status.json`` counts them; a heartbeat thread keeps
``status.json`` fresh while a chunk runs, so the UI can tell a busy worker from a dead one.

Started again on the same folder it resumes: a request with a final result never runs
twice. A job started with ``retry`` (see ``core.jobs.folder.start_worker``) also reruns failed
requests, except invalid input.

One worker holds the machine's engine at a time (``core.jobs.queue``): a worker that finds
the engine busy leaves its job queued and exits; the busy one runs it next, keeping the
model loaded when the next job uses the same one. A job whose requests name several
models (``body.model`` mapped to local folders) runs each model's requests in turn.

How requests run (one local engine, or replicas on a Ray cluster) is the executor's
business (core/run/local.py); the worker owns the job folder. SIGTERM (Cancel) stops the
worker within seconds; results written stay.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from core.check import scan
from core.check.requests import EngineRequest
from core.devices import gpu_count
from core.jobs.folder import HEARTBEAT_SECONDS, JobFolder, JobUnreadable
from core.jobs.ledger import read_ledger, shard_ids
from core.jobs.output_file import OutputWriter
from core.jobs.queue import EngineLock, queued_jobs
from core.plan.estimate import record_throughput
from core.run.engine import EngineLoadError, fit_to_requests
from core.run.local import make_executor
from core.run.monitoring import ResourceSampler, append_sample, progress_sample
from core.run.outputs import error_line, token_usage
from core.schemas import JobSpec, JobStatus, now_iso

log = logging.getLogger("core.run.worker")
RESERVE_BYTES = 1 << 20
MIN_REQUESTS_MEASURED = 8


class Cancelled(BaseException):
    """Raised in the main thread when the worker is asked to stop (SIGTERM/SIGINT).

    A BaseException, so that no ``except Exception`` on the way (engine retries) swallows it.
    """


class StatusKeeper:
    """Owns ``status.json``: counts, state changes and the heartbeat."""

    def __init__(self, job: JobFolder) -> None:
        self.job = job
        previous = job.read_status()
        self.status = JobStatus(
            history=previous.history, first_result_seconds=previous.first_result_seconds
        )
        self.succeeded: set[str] = set()
        self.failed: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def start(self, **changes: object) -> None:
        """Marks the job as taken by this process and starts the heartbeat."""
        self.update(pid=os.getpid(), started_at=now_iso(), **changes)
        self._reserve_space()
        self._thread.start()

    def _reserve_space(self) -> None:
        """Holds a little disk space, so the reason can still be written on a full disk."""
        try:
            with self.reserve.open("wb") as handle:
                os.posix_fallocate(handle.fileno(), 0, RESERVE_BYTES)
        except OSError:  # already short of space: nothing to hold
            self.reserve.unlink(missing_ok=True)

    @property
    def reserve(self) -> Path:
        return self.job.path / ".space-reserve"

    def update(self, state: str | None = None, **changes: object) -> None:
        with self._lock:
            if state is not None:
                self.status.enter(state, str(changes.pop("message", self.status.message)))
            for name, value in changes.items():
                setattr(self.status, name, value)
            self._write()

    def count(self, lines: list[dict]) -> None:
        """Adds written result lines to the counts (a retried success replaces a failure)."""
        with self._lock:
            s = self.status
            for line in lines:
                cid = line["custom_id"]
                if line["error"] is None:
                    prompt_tokens, completion_tokens = token_usage(line)
                    s.prompt_tokens += prompt_tokens
                    s.completion_tokens += completion_tokens
                    self.succeeded.add(cid)
                    self.failed.discard(cid)
                elif cid not in self.succeeded:
                    self.failed.add(cid)
            s.succeeded, s.failed = len(self.succeeded), len(self.failed)
            s.done = s.succeeded + s.failed
            self._write()

    def seed(self, succeeded: set[str], failed: set[str]) -> None:
        """Starts the counts from the result files, whatever the last status said."""
        self.succeeded, self.failed = set(succeeded), failed - succeeded
        self.count([])

    def first_result(self) -> None:
        if self.status.first_result_seconds is None:
            self.update(first_result_seconds=round(time.monotonic() - self._started, 2))

    def finish(self, state: str, message: str = "", error: str | None = None) -> None:
        self._stop.set()
        self.reserve.unlink(missing_ok=True)  # frees room for this last status
        self.update(state=state, message=message, error=error, finished_at=now_iso())

    def _write(self) -> None:
        self.status.heartbeat_at = time.time()
        self.status.elapsed_seconds = round(time.monotonic() - self._started, 2)
        self.job.write_status(self.status)

    def _beat(self) -> None:
        sampler = ResourceSampler()
        while not self._stop.wait(HEARTBEAT_SECONDS):
            resources = sampler.sample()
            with self._lock:
                self._write()
                s = self.status
                sample = progress_sample(s.done, s.completion_tokens, resources)
            append_sample(self.job.metrics, sample)


class ResultWriters:
    """Successes to ``output.jsonl``, failures to ``errors.jsonl``; counted once durable."""

    def __init__(self, job: JobFolder, keeper: StatusKeeper) -> None:
        self.output = OutputWriter(job.output)
        self.errors = OutputWriter(job.errors)
        self.keeper = keeper

    def write(self, lines: list[dict]) -> None:
        self.output.write(line for line in lines if line["error"] is None)
        self.errors.write(line for line in lines if line["error"] is not None)
        self.keeper.count(lines)

    def close(self) -> None:
        self.output.close()
        self.errors.close()


def _expired(spec: JobSpec) -> bool:
    if not spec.completion_window_hours:
        return False
    created = datetime.fromisoformat(spec.created_at).timestamp()
    return time.time() > created + spec.completion_window_hours * 3600


def run_job(job: JobFolder, retry: bool = False, shard: int | None = None) -> JobStatus:
    """Runs every request of the job without a final result; returns the final status.

    Args:
        job: the job folder.
        retry: also rerun failed requests (never those that failed as invalid input).
        shard: with ``retry``, rerun only this shard's requests.
    """
    spec = job.read_spec()
    ledger = read_ledger(job)  # a torn last line is skipped here and cut by the writers
    rerun = set(ledger.retryable()) if retry else set(ledger.missing)
    if retry and shard is not None:
        rerun &= set(shard_ids(ledger, spec.shard_size, shard))
    pending: list[EngineRequest] = []
    invalid: list[dict] = []
    seen: set[str] = set()
    for checked in scan(job.input, spec.defaults):
        custom_id = checked.custom_id or f"line-{checked.line_no}"
        if custom_id in seen or custom_id not in rerun:
            continue
        seen.add(custom_id)
        if checked.valid:
            pending.append(checked.request)
        elif custom_id not in ledger.failed:
            errors = "; ".join(p.message for p in checked.problems if p.severity == "error")
            invalid.append(
                error_line(custom_id, "invalid_request", f"line {checked.line_no}: {errors}")
            )

    keeper = StatusKeeper(job)
    writers = None
    try:
        keeper.start(state="loading", total=len(ledger.ids), message="loading the model")
        writers = ResultWriters(job, keeper)
        keeper.seed(ledger.succeeded, set(ledger.failed))
        writers.write(invalid)
        if pending and _run_pending(spec, pending, writers, keeper) == "expired":
            keeper.finish("expired", "the completion window ended; pending requests expired")
            return keeper.status
    except Cancelled:
        keeper.finish("cancelled", "cancelled; finished results are kept")
    except EngineLoadError as exc:
        keeper.finish("failed", "the model could not be loaded", error=str(exc))
    except Exception as exc:  # the job fails with the reason; results written stay
        log.exception("job %s failed", job.job_id)
        keeper.finish("failed", "the worker stopped on an error", error=repr(exc))
    else:
        if writers is not None:
            writers.close()
        _finish(job, keeper)
    finally:
        if writers is not None:
            writers.close()
    return keeper.status


def _finish(job: JobFolder, keeper: StatusKeeper) -> None:
    """Ends a run that went through: ``completed`` only when every input line has exactly
    one final result (else ``failed``, naming what is missing), and ``failed`` when every
    request failed, so no outcome reads as a success it is not."""
    ledger = read_ledger(job)
    problems = ledger.coverage_problems()
    s = keeper.status
    if problems:
        log.error("job %s: results do not cover the input: %s", job.job_id, problems)
        keeper.finish(
            "failed",
            "not every request has exactly one result"
            + ("; Resume runs those without one" if ledger.missing else ""),
            error="; ".join(problems),
        )
    elif s.failed and not s.succeeded:
        codes = Counter(str((e or {}).get("code", "error")) for e in ledger.failed.values())
        reasons = ", ".join(f"{n} {code}" for code, n in codes.most_common(3))
        keeper.finish("failed", f"all {s.failed} requests failed ({reasons})", error=reasons)
    elif s.failed:
        message = f"completed with errors: {s.succeeded} succeeded, {s.failed} failed"
        keeper.finish("completed", message)
    else:
        keeper.finish("completed", f"{s.succeeded} succeeded")


def _by_model(spec: JobSpec, pending: list[EngineRequest]) -> dict[str, list[EngineRequest]]:
    """Pending requests grouped by the local model folder their ``body.model`` maps to."""
    groups: dict[str, list[EngineRequest]] = {}
    for request in pending:
        folder = spec.model_map.get(request.model or "") or spec.engine.model
        groups.setdefault(folder, []).append(request)
    return groups


def _run_pending(
    spec: JobSpec, pending: list[EngineRequest], writers: ResultWriters, keeper: StatusKeeper
) -> str:
    left = {r.custom_id for r in pending}
    groups = _by_model(spec, pending)
    for number, (folder, requests) in enumerate(groups.items(), start=1):
        group = spec.on_model(folder)
        on_gpu = bool(spec.ray.gpus_per_replica) if spec.ray else gpu_count() > 0
        engine = fit_to_requests(group.engine, requests, on_gpu)
        executor = make_executor(group.model_copy(update={"engine": engine}), keeper.job.path)
        part = f" (model {number} of {len(groups)})" if len(groups) > 1 else ""
        keeper.update(
            state="running",
            model_load_seconds=round(executor.load_seconds, 2),
            message=f"running {len(requests)} requests {executor.description}{part}",
        )
        started, tokens, finished = time.monotonic(), 0, 0
        for lines in executor.run(requests):
            keeper.status.in_flight = getattr(executor, "in_flight", 0)
            writers.write(lines)
            keeper.first_result()
            left.difference_update(line["custom_id"] for line in lines)
            finished += len(lines)
            tokens += sum((token_usage(line) or (0, 0))[1] for line in lines)
            if left and _expired(spec):
                message = "the job's completion window ended before this request ran"
                writers.write([error_line(c, "expired", message, 408) for c in sorted(left)])
                return "expired"
        _record_throughput(keeper.job, folder, tokens, finished, time.monotonic() - started)
    return "completed"


def _record_throughput(
    job: JobFolder, folder: str, tokens: int, requests: int, seconds: float
) -> None:
    """Keeps the measured speed for estimates (only from runs long enough to mean it)."""
    if requests >= MIN_REQUESTS_MEASURED and tokens and seconds > 0:
        home = job.path.parent.parent
        record_throughput(Path(folder).name, tokens / seconds, requests / seconds, home=home)


def _raise_cancelled(signum: int, _frame: object) -> None:
    raise Cancelled(signal.Signals(signum).name)


def _waiting(job: JobFolder) -> bool:
    try:
        return job.read_status().state == "queued"
    except JobUnreadable:
        return True  # taken, so that it fails with its reason instead of waiting forever


def _run_queued(job: JobFolder) -> JobStatus:
    """Runs a job the queue hands over; one whose folder cannot be read fails alone, with
    the reason, and the queue goes on."""
    try:
        wanted = job.read_status()
        return run_job(job, retry=wanted.retry, shard=wanted.retry_shard)
    except JobUnreadable as exc:
        log.error("%s", exc)
        status = JobStatus(error=str(exc), finished_at=now_iso())
        status.enter("failed", "the job folder cannot be read")
        job.write_status(status)
        return status


def serve(job: JobFolder) -> JobStatus | None:
    """Runs ``job`` and then every queued job, holding the engine lock throughout.

    Returns ``job``'s final status, or None when another worker holds the engine (the job
    stays queued and that worker will run it).
    """
    jobs_dir = job.path.parent
    lock = EngineLock(jobs_dir)
    first: JobStatus | None = None
    while lock.acquire():
        try:
            while True:
                queue = queued_jobs(jobs_dir)
                if first is None and _waiting(job):  # the job this worker was started for
                    queue = [job] + [j for j in queue if j.job_id != job.job_id]
                if not queue:
                    break
                status = _run_queued(queue[0])
                if queue[0].job_id == job.job_id:
                    first = status
        finally:
            lock.release()
        if not queued_jobs(jobs_dir):  # checked after release: a job queued meanwhile
            break  # would otherwise wait for a worker that already gave up the lock
    if first is None:
        log.info("another worker holds the engine; job %s waits in the queue", job.job_id)
    return first


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m core.run.worker JOB_DIR", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    signal.signal(signal.SIGTERM, _raise_cancelled)
    signal.signal(signal.SIGINT, _raise_cancelled)
    status = serve(JobFolder(Path(argv[0])))
    return 0 if status is None or status.state == "completed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
