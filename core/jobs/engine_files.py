"""How the UI and the CLI talk to the resident worker: files in ``DATA/engine/``.

The worker (:mod:`core.run.resident`) keeps its models loaded for an idle time after its
last job. It tells what it holds in ``state.json`` (replaced atomically every couple of
seconds); others ask it things by dropping files it polls: ``commands/*.json`` (unload a
model, stop), each answered in ``answers/<id>.json`` with what the worker did
(:class:`EngineAnswer`, read by :func:`ask_engine`), and ``embed/*.request.json`` (texts
to embed on a loaded embedding model, answered beside them in ``*.answer.json``). Never
DuckDB: only the UI writes that.

The idle time comes from, in order: ``BATCH_STUDIO_ENGINE_IDLE`` (seconds; what
``core serve --engine-idle`` sets for the workers the app starts), the Settings page's
``settings.json``, else 10 minutes. The memory the loaded models may hold together comes
the same way: ``BATCH_STUDIO_ENGINE_MEMORY`` (MiB), else Settings, else no cap; and so
does how many jobs run side by side at most: ``BATCH_STUDIO_RUNNING_JOBS``, else Settings,
else 4. A worker reads them each time it needs them, so a change in Settings reaches a
running worker. This module loads no engine; the UI imports it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from core.config import REPO_ROOT
from core.files import write_atomic
from core.jobs.folder import JobFolder, JobUnreadable
from core.schemas import FrozenModel, worker_alive

log = logging.getLogger(__name__)

IDLE_ENV = "BATCH_STUDIO_ENGINE_IDLE"
BUDGET_ENV = "BATCH_STUDIO_ENGINE_MEMORY"  # MiB the loaded engines may hold together
RUNNING_ENV = "BATCH_STUDIO_RUNNING_JOBS"  # jobs one worker runs side by side at most
DEFAULT_RUNNING_JOBS = 4
DEFAULT_IDLE_SECONDS = 600.0
STATE_SECONDS = 2.0  # how often a resident worker rewrites state.json
POLL_SECONDS = 0.05  # how often it looks for work, commands and texts while idle
MAX_STARTS = 3  # workers one text may start
ANSWER_KEPT_SECONDS = 3600.0  # a command's answer nobody read is removed after this


class EngineSettings(FrozenModel):
    """``engine/settings.json``: what the Settings page sets."""

    idle_seconds: float = Field(DEFAULT_IDLE_SECONDS, ge=0)
    memory_mib: float = Field(0.0, ge=0)  # what the loaded models may hold; 0: no cap
    running_jobs: int = Field(DEFAULT_RUNNING_JOBS, ge=1)  # side by side at most; 1: in turn


class LoadedModel(FrozenModel):
    """One model the resident worker holds."""

    model: str  # its folder
    name: str
    kind: Literal["chat", "embedding", "cross-encoder"]  # core.model_folders.model_kind
    memory_mib: float  # what loading it took: RSS growth on a CPU, GPU memory on a GPU
    load_seconds: float
    loaded_at: float
    last_used: float
    job_ids: list[str] = Field(default_factory=list)  # the running jobs that use it now


class EngineState(FrozenModel):
    """``engine/state.json``: the resident worker and what it holds."""

    pid: int
    state: Literal["running", "idle"]
    job_id: str | None = None  # the first of job_ids (what a reader of one job reads)
    job_ids: list[str] = Field(default_factory=list)  # the jobs running now, side by side
    models: list[LoadedModel] = Field(default_factory=list)
    idle_seconds: float
    idle_since: float | None = None  # time.time() the last job ended, while idle
    rss_mib: float = 0.0  # the worker's whole RSS, its engines' child processes included
    stopping: bool = False  # told to stop: it starts no job and exits when the running end
    updated_at: float

    @property
    def exits_at(self) -> float | None:
        return None if self.idle_since is None else self.idle_since + self.idle_seconds


class EngineCommand(FrozenModel):
    """A file in ``engine/commands/``."""

    action: Literal["unload", "stop"]
    model: str | None = None  # unload: the model's folder or name; None: every model
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)  # names its answer


class EngineAnswer(FrozenModel):
    """What the worker did with a command (``engine/answers/<id>.json``): the rule itself is
    :meth:`core.run.resident.Resident.carry_out`; :func:`answer_lines` says it in words."""

    action: Literal["unload", "stop"]
    model: str | None = None  # as asked
    unloaded: list[str] = Field(default_factory=list)  # the models it unloaded now
    # The models that stay loaded because running jobs use them: name -> those jobs.
    kept: dict[str, list[str]] = Field(default_factory=dict)
    running: list[str] = Field(default_factory=list)  # stop: the jobs it lets finish first
    queued: int = 0  # stop: the jobs left queued for the next worker
    pid: int = 0  # the worker that answered


class EmbedRequest(FrozenModel):
    model: str  # the embedding model's folder
    texts: list[str]


class EmbedAnswer(FrozenModel):
    vectors: list[list[float]] | None = None
    error: str | None = None
    seconds: float = 0.0  # the engine's time on the texts


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%H:%M:%S")


def describe(state: EngineState | None) -> list[str]:
    """The state as lines a person reads."""
    if state is None:
        return ["no engine is loaded (no resident worker)"]
    ids = state.job_ids or ([state.job_id] if state.job_id else [])
    doing = ("running job " if len(ids) == 1 else "running jobs ") + ", ".join(ids)
    doing = doing if ids else "idle"
    if state.stopping:
        doing += "; stopping: it starts no new job and exits when these end"
    lines = [f"worker pid {state.pid}: {doing}, {state.rss_mib:,.0f} MiB resident"]
    if state.exits_at is not None:
        lines[0] += f"; exits at {_when(state.exits_at)} unless a job comes"
    for m in state.models:
        lines.append(
            f"  {m.name} ({m.kind}): {m.memory_mib:,.0f} MiB, loaded in {m.load_seconds:.1f} s "
            f"at {_when(m.loaded_at)}, last used {_when(m.last_used)}"
            + (f"; in use by {', '.join(m.job_ids)}" if m.job_ids else "")
        )
    if not state.models:
        lines.append("  no model loaded")
    return lines


def engine_dir(home: Path) -> Path:
    return home / "engine"


def state_file(home: Path) -> Path:
    return engine_dir(home) / "state.json"


def commands_dir(home: Path) -> Path:
    return engine_dir(home) / "commands"


def answers_dir(home: Path) -> Path:
    return engine_dir(home) / "answers"


def embed_dir(home: Path) -> Path:
    return engine_dir(home) / "embed"


def read_settings(home: Path) -> EngineSettings:
    try:
        return EngineSettings.model_validate_json((engine_dir(home) / "settings.json").read_text())
    except (OSError, ValidationError):
        return EngineSettings()


def write_settings(home: Path, settings: EngineSettings) -> None:
    write_atomic(engine_dir(home) / "settings.json", settings.model_dump_json(indent=1))


def idle_override() -> float | None:
    """The idle seconds set by the environment (``core serve --engine-idle``), if any."""
    try:
        value = float(os.environ[IDLE_ENV])
    except (KeyError, ValueError):
        return None
    return value if value >= 0 else None


def idle_seconds(home: Path) -> float:
    """How long a worker keeps its models loaded after its last job (the one rule)."""
    override = idle_override()
    return override if override is not None else read_settings(home).idle_seconds


def memory_override() -> float | None:
    """The memory cap (MiB) set by the environment (``BATCH_STUDIO_ENGINE_MEMORY``), if any."""
    value = os.environ.get(BUDGET_ENV, "").strip()
    if not value:
        return None
    try:
        mib = float(value)
    except ValueError:
        log.warning("%s=%r is not a number of MiB; ignored", BUDGET_ENV, value)
        return None
    return mib if mib >= 0 else None


def memory_budget_mib(home: Path | None) -> float | None:
    """What a worker's loaded models may hold together, in MiB (None: no cap beyond the
    machine's free memory): the one rule, read at each load."""
    override = memory_override()
    mib = override if override is not None or home is None else read_settings(home).memory_mib
    return mib or None


def running_override() -> int | None:
    """The most jobs side by side set by the environment (``BATCH_STUDIO_RUNNING_JOBS``)."""
    value = os.environ.get(RUNNING_ENV, "").strip()
    if not value:
        return None
    try:
        count = int(value)
    except ValueError:
        log.warning("%s=%r is not a whole number of jobs; ignored", RUNNING_ENV, value)
        return None
    return count if count >= 1 else None


def running_jobs_cap(home: Path) -> int:
    """How many jobs one worker runs side by side at most (1: one after another, as the
    worker ran them before jobs shared the engine): the one rule, read at each admission."""
    override = running_override()
    return override if override is not None else read_settings(home).running_jobs


def read_state(home: Path) -> EngineState | None:
    """The resident worker's state, or None when no worker is alive to hold one."""
    try:
        state = EngineState.model_validate_json(state_file(home).read_text())
    except (OSError, ValidationError):
        return None
    return state if worker_alive(state.pid) else None


def write_state(home: Path, state: EngineState) -> None:
    write_atomic(state_file(home), state.model_dump_json(indent=1))


def send_command(home: Path, command: EngineCommand) -> Path:
    """Drops a command for the resident worker; returns its file (gone once done)."""
    path = commands_dir(home) / f"{time.time_ns()}-{uuid.uuid4().hex[:8]}.json"
    write_atomic(path, command.model_dump_json())
    return path


def take_commands(home: Path) -> list[EngineCommand]:
    """The commands waiting, oldest first, removed from the folder (a broken one too)."""
    folder = commands_dir(home)
    if not folder.is_dir():
        return []
    taken = []
    for path in sorted(folder.glob("*.json")):
        # Not a command: dropped all the same, so it is not read again every poll.
        with contextlib.suppress(OSError, ValidationError):
            taken.append(EngineCommand.model_validate_json(path.read_text()))
        path.unlink(missing_ok=True)
    return taken


def answer_command(home: Path, command: EngineCommand, answer: EngineAnswer) -> None:
    """The worker's side: what it did with ``command``, for whoever asked."""
    folder = answers_dir(home)
    for old in folder.glob("*.json") if folder.is_dir() else ():
        # An asker that gave up (a worker running a job alone answers after it) reads none.
        with contextlib.suppress(OSError):
            if time.time() - old.stat().st_mtime > ANSWER_KEPT_SECONDS:
                old.unlink()
    write_atomic(folder / f"{command.id}.json", answer.model_dump_json())


def ask_engine(home: Path, command: EngineCommand, timeout: float) -> EngineAnswer | None:
    """Sends ``command`` and waits up to ``timeout`` seconds for the worker's answer; None
    when none came (a worker running jobs one at a time reads commands between them: the
    command stays, and it is carried out then)."""
    send_command(home, command)
    path = answers_dir(home) / f"{command.id}.json"
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = EngineAnswer.model_validate_json(path.read_text())
        except (OSError, ValidationError):  # not yet
            answer = None
        if answer is not None:
            path.unlink(missing_ok=True)
            return answer
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _jobs(job_ids: list[str]) -> str:
    return ("job " if len(job_ids) == 1 else "jobs ") + ", ".join(job_ids)


def answer_lines(answer: EngineAnswer) -> list[str]:
    """A command's answer as lines a person reads (the CLI prints them, Settings shows them)."""
    lines = []
    if answer.action == "stop" and answer.running:
        n = len(answer.running)
        lines.append(
            f"worker {answer.pid} is stopping after {n} running job{'s' if n != 1 else ''}: "
            f"{', '.join(answer.running)}; it starts no new job, then unloads every model and "
            "exits"
        )
        if answer.queued:
            one = answer.queued == 1
            lines.append(
                f"{answer.queued} queued job{' stays' if one else 's stay'} queued and "
                f"start{'s' if one else ''} with the next worker"
            )
    if answer.unloaded:
        lines.append("unloaded " + ", ".join(answer.unloaded))
    for name, job_ids in answer.kept.items() if answer.action == "unload" else ():
        verb = "uses" if len(job_ids) == 1 else "use"
        lines.append(f"{name} stays loaded: running {_jobs(job_ids)} {verb} it")
    if answer.action == "unload" and not answer.unloaded and not answer.kept:
        lines.append(f"{answer.model} is not loaded" if answer.model else "no model is loaded")
    return lines


def start_resident(home: Path) -> subprocess.Popen:
    """Starts a worker with no job, to serve texts to embed (it exits after its idle time,
    or at once when another worker holds the engine: that one serves them)."""
    jobs = home / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    engine_dir(home).mkdir(parents=True, exist_ok=True)
    with (engine_dir(home) / "resident.log").open("ab") as log:  # the child keeps its own
        return subprocess.Popen(
            [sys.executable, "-m", "core.run.worker", "--resident", str(jobs)],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def running_jobs(home: Path) -> list[str]:
    """The jobs the resident worker runs now. One whose status is final is not among them,
    though ``state.json`` lists it a moment longer (its thread then indexes its answers)."""
    state = read_state(home)
    if state is None:
        return []
    listed = state.job_ids or ([state.job_id] if state.job_id else [])  # job_id: one job
    running = []
    for job_id in listed:
        try:
            final = JobFolder(home / "jobs" / job_id).read_status().is_final
        except JobUnreadable:
            final = False  # the worker's to judge: it says when that job ends
        if not final:
            running.append(job_id)
    return running


class EngineBusy(RuntimeError):
    """No answer in time: the worker is running a job, or could not load the model."""


def embed_on_engine(home: Path, model: Path, texts: list[str], timeout: float) -> EmbedAnswer:
    """Embeds ``texts`` on the resident worker's ``model`` (loading it there if needed,
    starting a worker if none runs).

    Raises:
        EngineBusy: the worker is running a job (texts are served between jobs), or no
            answer came within ``timeout`` seconds.
    """
    busy = running_jobs(home)
    if busy:
        raise EngineBusy(f"the engine is running job {busy[0]}; try again when it ends")
    folder = embed_dir(home)
    name = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}"
    request, answer = folder / f"{name}.request.json", folder / f"{name}.answer.json"
    write_atomic(request, EmbedRequest(model=str(model), texts=texts).model_dump_json())
    started, starts = None, 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if answer.exists():
                return EmbedAnswer.model_validate_json(answer.read_text())
            # No worker alive: start one (one that finds the engine taken exits at once; a
            # few tries, so a worker that cannot start is not started again and again).
            idle = started is None or started.poll() is not None
            if idle and starts < MAX_STARTS and read_state(home) is None:
                started, starts = start_resident(home), starts + 1
            time.sleep(0.01)
        raise EngineBusy(f"no engine answered within {timeout:.0f} s (a job may be running on it)")
    finally:
        request.unlink(missing_ok=True)
        answer.unlink(missing_ok=True)


def pending_embeds(home: Path) -> list[tuple[Path, EmbedRequest | None]]:
    """Requests waiting for vectors, oldest first (None: a request that cannot be read)."""
    folder = embed_dir(home)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.request.json")):
        try:
            found.append((path, EmbedRequest.model_validate_json(path.read_text())))
        except (OSError, ValidationError):
            found.append((path, None))
    return found


def answer_embed(request: Path, answer: EmbedAnswer) -> None:
    """Writes the answer beside its request, unless the asker gave up (request gone)."""
    if request.exists():
        target = request.with_name(request.name.replace(".request.json", ".answer.json"))
        write_atomic(target, answer.model_dump_json())
