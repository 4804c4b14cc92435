"""The job folder: the truth on disk, shared by the UI, the CLI and the worker.

    jobs/<job_id>/
        job.json      what to run (engine settings, job defaults), written once
        input.jsonl   the batch file, copied in
        output.jsonl  one result line per request, appended and fsynced in chunks
        status.json   state, counts and heartbeat, replaced atomically by the worker
        worker.log    the worker's own log

Only the worker writes ``output.jsonl`` and ``status.json``; the UI reads them.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.config import REPO_ROOT
from core.engine import EngineConfig
from core.requests import JobDefaults

FINAL_STATES = ("completed", "failed", "cancelled")
HEARTBEAT_SECONDS = 2.0
STALE_AFTER_SECONDS = 30.0


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Writes JSON so a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(tmp, path)


@dataclass
class JobSpec:
    """What a job runs; ``job.json``."""

    job_id: str
    created_at: str
    source: str
    engine: dict[str, Any]
    defaults: dict[str, Any] = field(default_factory=dict)
    skip_invalid: bool = False
    chunk_size: int = 128
    input_sha256: str = ""

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobStatus:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def interrupted(self) -> bool:
        """A job whose worker died without saying so: not final, and no fresh heartbeat."""
        if self.is_final or self.state == "queued":
            return False
        return self.heartbeat_at is None or time.time() - self.heartbeat_at > STALE_AFTER_SECONDS

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
        write_json_atomic(self.status_file, asdict(status))

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def new_job_id() -> str:
    return f"job_{datetime.now(UTC):%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"


def create_job(
    input_file: str | Path,
    jobs_dir: Path,
    engine: EngineConfig,
    defaults: JobDefaults | None = None,
    *,
    skip_invalid: bool = False,
    chunk_size: int = 128,
    source: str | None = None,
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
        input_sha256=file_sha256(job.input),
    )
    write_json_atomic(job.spec_file, asdict(spec))
    job.write_status(JobStatus(state="queued", message="waiting for the worker to start"))
    return job


def start_worker(job: JobFolder) -> subprocess.Popen:
    """Starts ``python -m core.worker JOB_DIR`` in its own session, so it outlives the UI."""
    log = job.log_file.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "core.worker", str(job.path)],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def list_jobs(jobs_dir: Path) -> list[JobFolder]:
    """Job folders, newest first."""
    if not jobs_dir.is_dir():
        return []
    folders = [p for p in jobs_dir.iterdir() if (p / "job.json").is_file()]
    return [JobFolder(p) for p in sorted(folders, key=lambda p: p.name, reverse=True)]
