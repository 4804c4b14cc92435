"""``python -m core.worker JOB_DIR``: runs one job folder to the end.

The worker loads the engine once, runs the requests that have no result yet in chunks,
appends each chunk's result lines to ``output.jsonl`` (durably) and then refreshes
``status.json``. A heartbeat thread keeps ``status.json`` fresh while a chunk runs, so the
UI can tell a busy worker from a dead one. Started again on the same folder, it resumes:
requests that already have a result line are not run twice.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from core.checks import scan
from core.engine import Engine, EngineLoadError, EngineRequestError
from core.jobs import HEARTBEAT_SECONDS, JobFolder, JobSpec, JobStatus, now_iso
from core.output_file import OutputWriter, read_lines, repair_torn_tail
from core.outputs import Completion, error_line, success_line
from core.requests import EngineRequest

log = logging.getLogger("core.worker")
FIRST_CHUNK = 8  # a small first chunk puts the first results on screen quickly


class Cancelled(Exception):
    """Raised in the main thread when the worker is asked to stop (SIGTERM/SIGINT)."""


class StatusKeeper:
    """Owns ``status.json``: counts, state changes and the heartbeat."""

    def __init__(self, job: JobFolder) -> None:
        self.job = job
        self.status = job.read_status()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def start(self, **changes: object) -> None:
        """Marks the job as taken by this process, with counts reset to zero."""
        fresh = JobStatus(first_result_seconds=self.status.first_result_seconds)
        self.status = fresh
        self.update(pid=os.getpid(), started_at=now_iso(), **changes)
        self._thread.start()

    def update(self, **changes: object) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(self.status, name, value)
            self._write()

    def count(self, lines: list[dict]) -> None:
        """Adds a written chunk's result lines to the counts."""
        with self._lock:
            s = self.status
            for line in lines:
                s.done += 1
                usage = ((line.get("response") or {}).get("body") or {}).get("usage")
                if line["error"] is None:
                    s.succeeded += 1
                    s.prompt_tokens += usage["prompt_tokens"]
                    s.completion_tokens += usage["completion_tokens"]
                else:
                    s.failed += 1
            self._write()

    def first_result(self) -> None:
        if self.status.first_result_seconds is None:
            self.update(first_result_seconds=round(time.monotonic() - self._started, 2))

    def finish(self, state: str, message: str = "", error: str | None = None) -> None:
        self._stop.set()
        self.update(state=state, message=message, error=error, finished_at=now_iso())

    def _write(self) -> None:
        self.status.heartbeat_at = time.time()
        self.status.elapsed_seconds = round(time.monotonic() - self._started, 2)
        self.job.write_status(self.status)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            with self._lock:
                self._write()


def _chunks(requests: list[EngineRequest], size: int) -> Iterator[list[EngineRequest]]:
    start, step = 0, min(FIRST_CHUNK, size)
    while start < len(requests):
        yield requests[start : start + step]
        start, step = start + step, size


def _result_line(request: EngineRequest, model: str, result: Completion | Exception) -> dict:
    if isinstance(result, EngineRequestError):
        return error_line(request.custom_id, "engine_rejected", str(result))
    return success_line(request.custom_id, model, result)


def run_job(job: JobFolder) -> JobStatus:
    """Runs every request of the job that has no result line yet; returns the final status."""
    spec = job.read_spec()
    keeper = StatusKeeper(job)
    repair_torn_tail(job.output)
    written = list(read_lines(job.output))
    done = {line["custom_id"] for line in written}
    pending: list[EngineRequest] = []
    invalid: list[dict] = []
    seen: set[str] = set()
    total = 0
    for checked in scan(job.input, spec.job_defaults):
        custom_id = checked.custom_id or f"line-{checked.line_no}"
        if custom_id in seen:  # a repeated id gets no second result (jobs refuse them anyway)
            continue
        seen.add(custom_id)
        total += 1
        if custom_id in done:
            continue
        if checked.valid:
            pending.append(checked.request)
        else:
            errors = "; ".join(p.message for p in checked.problems if p.severity == "error")
            invalid.append(
                error_line(custom_id, "invalid_request", f"line {checked.line_no}: {errors}")
            )

    keeper.start(state="loading", total=total, message="loading the model")
    keeper.count(written)  # counts come from the file, whatever the last status said
    try:
        with OutputWriter(job.output) as writer:
            writer.write(invalid)
            keeper.count(invalid)
            if pending:
                _run_pending(spec, pending, writer, keeper)
    except Cancelled:
        keeper.finish("cancelled", "cancelled; finished results are kept")
    except EngineLoadError as exc:
        keeper.finish("failed", "the model could not be loaded", error=str(exc))
    except Exception as exc:  # the job fails with the reason; results written stay
        log.exception("job %s failed", job.job_id)
        keeper.finish("failed", "the worker stopped on an error", error=repr(exc))
    else:
        s = keeper.status
        keeper.finish("completed", f"{s.succeeded} succeeded, {s.failed} failed")
    return keeper.status


def _run_pending(
    spec: JobSpec, pending: list[EngineRequest], writer: OutputWriter, keeper: StatusKeeper
) -> None:
    engine = Engine(spec.engine_config)
    model = spec.engine_config.model_name
    keeper.update(
        state="running",
        model_load_seconds=round(engine.load_seconds, 2),
        message=f"running {len(pending)} requests on {model}",
    )
    for chunk in _chunks(pending, spec.chunk_size):
        results = engine.run(chunk)
        lines = [_result_line(r, model, res) for r, res in zip(chunk, results, strict=True)]
        writer.write(lines)
        keeper.first_result()
        keeper.count(lines)


def _raise_cancelled(signum: int, _frame: object) -> None:
    raise Cancelled(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m core.worker JOB_DIR", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    signal.signal(signal.SIGTERM, _raise_cancelled)
    signal.signal(signal.SIGINT, _raise_cancelled)
    status = run_job(JobFolder(Path(argv[0])))
    return 0 if status.state == "completed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
