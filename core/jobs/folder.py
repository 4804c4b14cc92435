"""The job folder: the truth on disk, shared by the UI, the CLI and the worker.

    jobs/<job_id>/
        job.json      what to run (engine settings, job defaults, its name), written once
        name.txt      the job's name as renamed later (it wins over job.json's)
        input.jsonl   the batch file, copied in
        output.jsonl  one success line per request, appended and fsynced in chunks
        errors.jsonl  failure lines (OpenAI's layout); a retried request may appear again
        metrics.jsonl progress and resource samples, one per heartbeat
        acks.jsonl    a Ray job's acknowledged result parts in object storage (s3 output)
        status.json   state, counts and heartbeat, replaced atomically by the worker
        worker.log    the worker's own log

Only the worker writes the result files and ``status.json``; the UI and CLI read them, and
ask a worker to stop with a signal (see :func:`cancel`).
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.config import REPO_ROOT, reuse_default
from core.files import JsonUnreadable, file_sha256, load_json, odd_entry, write_atomic
from core.jobs.engine_lock import EngineLock
from core.jobs.windows import RunWindows
from core.model_names import adapters_of
from core.schemas import (
    DEFAULT_PHONE_REGION,
    HELD_STATES,
    WAITING_STATES,
    BatchOrigin,
    EngineConfig,
    JobDefaults,
    JobSpec,
    JobStatus,
    JudgeLink,
    RaySettings,
    check_name,
    now_iso,
    problems_of,
    read_name,
    to_json,
    worker_alive,
)
from core.webhooks.outbox import record_end

HEARTBEAT_SECONDS = 2.0
STATUS_LOCK = ".status.lock"


class JobUnreadable(Exception):
    """A job folder whose ``job.json`` or ``status.json`` cannot be read: that job's error,
    never the studio's (callers that walk every job skip it and say so)."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id} is unreadable: {reason}")
        self.job_id, self.reason = job_id, reason


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(problems_of(exc))
    if isinstance(exc, FileNotFoundError):
        return f"{Path(exc.filename or '').name or 'a file'} is missing"
    return f"{type(exc).__name__}: {exc}"


class JobFolder:
    """Paths and reads of one job folder. Its id is the folder's own name, never an id
    written inside it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.job_id = self.path.name

    input = property(lambda self: self.path / "input.jsonl")
    output = property(lambda self: self.path / "output.jsonl")
    errors = property(lambda self: self.path / "errors.jsonl")
    metrics = property(lambda self: self.path / "metrics.jsonl")
    # A Ray job's acknowledgements of result parts its replicas wrote to object storage.
    acks = property(lambda self: self.path / "acks.jsonl")
    spec_file = property(lambda self: self.path / "job.json")
    status_file = property(lambda self: self.path / "status.json")
    log_file = property(lambda self: self.path / "worker.log")
    # A cancel of this job while its worker runs it (``now`` or ``step``): a worker running
    # jobs side by side stops this one alone. Removed when a worker takes the job.
    cancel_file = property(lambda self: self.path / "cancel")
    name_file = property(lambda self: self.path / "name.txt")
    # Lines the check refused with the job's models (a prompt beyond the context, a token id
    # the model lacks...), which a structural scan cannot see: line number -> the problem.
    refusals_file = property(lambda self: self.path / "refused.json")
    # What redaction replaced, by custom_id: kept only where the owner asked (JobSpec).
    redactions_file = property(lambda self: self.path / "redactions.json")

    def check_own(self) -> None:
        """Raises :class:`JobUnreadable` unless the folder and everything in it are what
        the studio makes: a real folder of regular files (and folders), no symbolic link
        (which could lead out of the data folder), no FIFO or device (which blocks a reader).
        Every read of ``job.json`` or ``status.json``, and a rename, check this first."""
        if odd_entry(self.path, directory=True) is not None:
            raise JobUnreadable(self.job_id, "the job folder is a symbolic link or not a folder")
        if self.path.is_dir():
            for entry in self.path.iterdir():
                reason = odd_entry(entry, directory=True)
                if reason is not None:
                    raise JobUnreadable(self.job_id, reason)

    def write_refusals(self, refusals: dict[int, dict[str, str | None]]) -> None:
        """Keeps the lines the submission's check refused (see :attr:`refusals_file`)."""
        write_atomic(self.refusals_file, json.dumps({str(k): v for k, v in refusals.items()}))

    def keep_redactions(self, replaced: dict[str, list[tuple[str, str, str]]]) -> None:
        """Adds what redaction replaced in these requests (by custom_id: each placeholder,
        its kind and the value it stands for) to :attr:`redactions_file`."""
        kept = {}
        if self.redactions_file.is_file():
            try:
                kept = json.loads(self.redactions_file.read_text(encoding="utf-8"))
            except ValueError:  # a damaged file: this run's replacements start it again
                kept = {}
        for custom_id, items in replaced.items():
            kept[custom_id] = [
                {"placeholder": held, "kind": kind, "value": value} for held, kind, value in items
            ]
        write_atomic(self.redactions_file, json.dumps(kept, ensure_ascii=False, indent=1))

    def read_refusals(self) -> dict[int, dict[str, str | None]]:
        """The lines the submission's check refused; none for a job made without them."""
        try:
            data = load_json(self.refusals_file)
        except JsonUnreadable as exc:
            if exc.missing:
                return {}
            raise JobUnreadable(self.job_id, f"refused.json: {exc.reason}") from None
        if not isinstance(data, dict):
            raise JobUnreadable(self.job_id, "refused.json: not an object of line numbers")
        return {int(k): v for k, v in data.items()}

    @property
    def name(self) -> str:
        """What people call the job: its rename (``name.txt``), else the name it was
        submitted with (``job.json``); "" when it has none (a job made before names).
        Raises :class:`JobUnreadable` when a file cannot be read."""
        try:
            renamed = read_name(self.name_file.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            renamed = ""
        except OSError as exc:
            raise JobUnreadable(self.job_id, f"name.txt: {_reason(exc)}") from None
        return renamed or self.read_spec().name

    def rename(self, text: str) -> str:
        """Gives the job a new name (``job.json`` is written once, so the name goes into
        ``name.txt``, atomically); returns the name as kept.

        Raises:
            ValueError: the name is empty or too long (see ``core.schemas.check_name``).
        """
        name = check_name(text)
        self.check_own()  # never written through a link to outside the data folder
        write_atomic(self.name_file, name + "\n")
        return name

    def read_spec(self) -> JobSpec:
        """``job.json``; raises :class:`JobUnreadable` with the reason when it cannot be read."""
        self.check_own()
        try:
            return JobSpec.model_validate_json(self.spec_file.read_bytes())
        except (OSError, ValueError) as exc:  # ValidationError is a ValueError
            raise JobUnreadable(self.job_id, f"job.json: {_reason(exc)}") from None

    def read_status(self) -> JobStatus:
        """``status.json`` (a fresh status before the first one is written); raises
        :class:`JobUnreadable` with the reason when it cannot be read."""
        self.check_own()
        try:
            return JobStatus.model_validate_json(self.status_file.read_bytes())
        except FileNotFoundError:
            return JobStatus()
        except (OSError, ValueError) as exc:
            raise JobUnreadable(self.job_id, f"status.json: {_reason(exc)}") from None

    def peek_spec(self) -> JobSpec:
        """``job.json`` as :meth:`read_spec` reads it, from memory while the folder and the
        file are unchanged since the last read: for listings that look at every job on each
        scan or rerun (the queue, a page's job list), whose cost would otherwise grow with
        every job of every owner. Shared: never change what it returns (write a copy).

        Raises:
            JobUnreadable: as :meth:`read_spec`.
        """
        return _peek(self, self.spec_file, self.read_spec)

    def peek_status(self) -> JobStatus:
        """``status.json`` as :meth:`read_status` reads it, from memory while unchanged
        (see :meth:`peek_spec`). Shared: change a :meth:`read_status` instead."""
        return _peek(self, self.status_file, self.read_status)

    def readable(self) -> str | None:
        """None when its files read; else why not (for listings that go on past it)."""
        try:
            self.read_spec()
            self.read_status()
            self.name  # noqa: B018 (name.txt, after a rename)
        except JobUnreadable as exc:
            return exc.reason
        return None

    def write_status(self, status: JobStatus) -> None:
        write_atomic(self.status_file, status.to_json())
        self.record_end(status)

    def record_end(self, status: JobStatus) -> None:
        """A final status's webhook event, in the outbox (sent by the dispatcher, never
        here): every writer of a job's end calls it, the worker included."""
        record_end(self.path.parent.parent, self.job_id, status)

    @contextmanager
    def status_lock(self) -> Iterator[None]:
        """Holds the job's status lock (an ``flock`` on ``.status.lock``, dropped by the
        kernel if the holder dies) for a read-then-write of ``status.json`` that must not
        interleave with another process's: a cancel, the worker taking the job, a queueing.
        The worker's own updates while it runs need none: nobody else writes then."""
        self.check_own()
        with (self.path / STATUS_LOCK).open("ab") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield  # the lock goes with the handle

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


PEEKS_KEPT = 50_000  # parsed job files kept by peek_spec/peek_status (then all dropped)
_PEEKED: dict[Path, tuple[tuple, Any]] = {}


def _stamp(job: JobFolder, file: Path) -> tuple | None:
    """What changes when the folder's entries or the file change: the folder's and the
    file's inode, times and size (an entry added, removed or replaced, a symbolic link
    among them, changes the folder's). None for anything but a real folder and a regular
    file (the full read then says why), or no file (a job not yet given a status)."""
    try:
        folder, info = os.lstat(job.path), os.lstat(file)
    except OSError:
        return None
    if not (stat.S_ISDIR(folder.st_mode) and stat.S_ISREG(info.st_mode)):
        return None
    return tuple((i.st_ino, i.st_mtime_ns, i.st_ctime_ns, i.st_size) for i in (folder, info))


def _peek(job: JobFolder, file: Path, read: Any) -> Any:
    """``read()`` of one of the job's files, kept while :func:`_stamp` says it is the same
    (a read done while it changed is not kept)."""
    stamp = _stamp(job, file)
    kept = _PEEKED.get(file)
    if stamp is not None and kept is not None and kept[0] == stamp:
        return kept[1]
    value = read()
    if stamp is not None and stamp == _stamp(job, file):
        if len(_PEEKED) >= PEEKS_KEPT:
            _PEEKED.clear()
        _PEEKED[file] = (stamp, value)
    return value


CANCEL_SIGNAL = signal.SIGUSR1
"""What a cancel sends the job's worker (``core.run.stopping``): the job stops and the worker
goes on with its queue, where SIGTERM (a service manager) stops the job and then the worker."""


def cancel(job: JobFolder, now: bool = False) -> str:
    """Asks the job's worker to stop; finished results stay. Returns what happened.

    A cancel stops the engine within seconds (at its next step): the requests inside are
    aborted, those already finished are kept, and the job ends ``cancelled`` saying how
    many have a result. ``now``, or a second cancel, stops at once, without waiting for
    the step (SIGINT). Either way a resume runs exactly the requests without a result.
    """
    with job.status_lock():  # a worker takes a job under it too: one of the two is first
        status = job.read_status()
        if status.is_final:
            return f"job is already {status.state}"
        taken = status.state not in WAITING_STATES and status.pid is not None
        if taken and worker_alive(status.pid):
            write_atomic(job.cancel_file, "now" if now else "step")  # which job: the signal
            os.kill(status.pid, signal.SIGINT if now else CANCEL_SIGNAL)  # cannot name it
            return (
                "stopping now" if now else "cancelling: the engine stops within seconds"
            ) + "; every result written is kept, and a resume runs the requests without one"
        waited = status.state in WAITING_STATES or status.state in HELD_STATES
        paused = waited and status.paused_at is not None  # its run window closed mid-job
        said = "cancelled before it ran" if waited else "cancelled"
        if paused:
            said = f"cancelled while paused outside its run windows, {status.done:,} done"
        status.enter("cancelled", said)
        status.finished_at = now_iso()
        job.write_status(status)
    if paused:
        return "job cancelled while paused: its results stay, and no worker will run it"
    if waited:
        return "job cancelled: it had not started, and no worker will run it"
    return "job marked cancelled (its worker was not running)"


def new_job_id() -> str:
    return f"job_{datetime.now(UTC):%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"


class StillRunning(ValueError):
    """A job that has not ended cannot be deleted; the message says what to do."""


def delete_job(job: JobFolder) -> None:
    """Deletes an ended job: its folder goes, and with it the job from every page (the
    store forgets a job whose folder is gone). Under the status lock, so a worker cannot
    take it meanwhile.

    Raises:
        StillRunning: the job has not ended (cancel it first).
        JobUnreadable: its files cannot be read.
    """
    with job.status_lock():
        status = job.read_status()
        if not status.is_final:
            raise StillRunning(
                f"job {job.job_id} is {status.state}: only an ended job can be deleted; "
                "cancel it first"
            )
        shutil.rmtree(job.path)


def remove_folder(job: JobFolder) -> None:
    """Removes a job folder that was never made whole (no job to show, nothing to keep)."""
    shutil.rmtree(job.path, ignore_errors=True)


def job_owner(provenance: Mapping[str, Any]) -> str | None:
    """Who owns a job, from its ``job.json`` provenance: its API key's id (``key:<id>``),
    else the user who made it (``user:<name>``: signed in, or this machine's). None for a
    job made before keys had ids, whose owner's name cannot tell a key from a user. Whose
    answers reuse may take (core/reuse) and whose quota a job counts against
    (core/jobs/quotas.py)."""
    if "owner_key" not in provenance:
        return None
    key, name = provenance.get("owner_key"), provenance.get("owner")
    if isinstance(key, str):
        return f"key:{key}"
    return f"user:{name}" if isinstance(name, str) else None


def local_owner(user: str | None = None) -> str:
    """The owner of a job made without a key by ``user`` (None: this machine's user, as
    :func:`create_job` records it)."""
    return f"user:{user or getpass.getuser()}"


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
    ray: RaySettings | None = None,
    model_map: dict[str, str] | None = None,
    shard_size: int = 10_000,
    owner: str | None = None,
    owner_key: str | None = None,
    name: str = "",
    embedding_model: str | None = None,
    judge: JudgeLink | None = None,
    metadata: dict[str, str] | None = None,
    batch: BatchOrigin | None = None,
    endpoints: list[str] | None = None,
    reuse: bool | None = None,
    run_windows: RunWindows | None = None,
    redact: bool = False,
    keep_redactions: bool = False,
    phone_region: str = DEFAULT_PHONE_REGION,
) -> JobFolder:
    """Makes a job folder with a copy of the input and its ``job.json``; ``owner`` (the
    signed-in user, else this machine's user) and ``owner_key`` (the API key that made
    it, recorded as None when none did) go into its provenance; ``reuse`` None: the
    studio's default (:func:`core.config.reuse_default`). An unusable mapped adapter is
    left out of its ``adapters`` (the check refuses the lines that name it).

    Raises:
        OSError: the folder could not be made whole (a full disk); nothing of it is kept.
    """
    input_file = Path(input_file)
    job = JobFolder(jobs_dir / new_job_id())
    job.path.mkdir(parents=True)
    try:
        shutil.copyfile(input_file, job.input)
        spec = JobSpec(
            job_id=job.job_id,
            created_at=now_iso(),
            name=name,
            source=source or input_file.name,
            engine=engine,
            defaults=defaults or JobDefaults(),
            skip_invalid=skip_invalid,
            chunk_size=chunk_size,
            completion_window_hours=completion_window_hours,
            input_sha256=file_sha256(job.input),
            input_lines=sum(1 for raw in job.input.open("rb") if raw.strip()),
            output_path=output_path,
            ray=ray,
            model_map=dict(model_map or {}),
            adapters=adapters_of(dict(model_map or {})),
            embedding_model=embedding_model,
            shard_size=shard_size,
            provenance={
                **provenance(engine),
                "owner": owner or getpass.getuser(),
                "owner_key": owner_key,
            },
            judge=judge,
            metadata=dict(metadata or {}),
            batch=batch,
            endpoints=sorted(endpoints or ()),
            reuse=reuse_default() if reuse is None else reuse,
            run_windows=run_windows.text if run_windows else "",
            run_windows_zone=run_windows.zone if run_windows else "UTC",
            redact=redact,
            keep_redactions=redact and keep_redactions,
            phone_region=phone_region,
        )
        write_atomic(job.spec_file, to_json(spec))
        # Its requests are known now: a waiting job showed "0 / 0 requests".
        status = JobStatus(state="created", total=spec.input_lines)
        status.enter("created", "waiting for the worker to start")
        job.write_status(status)
    except BaseException:  # a full disk mid-copy: no half-made folder, shown nowhere
        remove_folder(job)
        raise
    return job


QUEUE_MARK = "queue.changed"  # touched when a job is queued: an idle worker stats it


def mark_queue_changed(jobs_dir: Path) -> None:
    """Tells an idle resident worker to look at the queue now (it also looks every few
    seconds, for jobs queued another way)."""
    (jobs_dir / QUEUE_MARK).touch()


def queue_changed_at(jobs_dir: Path) -> int:
    try:
        return (jobs_dir / QUEUE_MARK).stat().st_mtime_ns
    except OSError:
        return 0


def queue_job(job: JobFolder, *, retry: bool = False, shard: int | None = None) -> None:
    """Marks the job ``queued`` for the next run (a resume, a retry, one shard's retry) and
    tells an idle worker; :func:`start_worker` also starts one."""
    with job.status_lock():
        status = job.read_status()
        status.enter("queued", "waiting for the engine")
        status.error, status.pid, status.finished_at, status.retry = None, None, None, retry
        status.retry_shard, status.retry_errors_from = shard, None  # a retry asked anew
        status.delivered_to = status.delivery_error = None  # this run delivers anew
        status.interruptions = 0  # a person asked for this run: it may be interrupted anew
        job.write_status(status)
    mark_queue_changed(job.path.parent)


def start_worker(
    job: JobFolder, *, retry: bool = False, shard: int | None = None
) -> subprocess.Popen | None:
    """Queues the job, and starts ``python -m core.run.worker JOB_DIR`` in its own session
    (so it outlives the UI) unless a worker holds the engine: that one runs the job next.

    The status is reset to ``queued`` first, so nobody mistakes the previous run's final
    state for this one's.

    Returns:
        The started worker, or None when the worker holding the engine takes the job (a
        second one would only import vLLM beside it, taking CPU from its run, and exit).
    """
    queue_job(job, retry=retry, shard=shard)
    # Queued before the lock is read: a holder that is ending reads the queue after it
    # lets go of the lock and runs the job (core.run.worker.serve), so it is never stranded.
    if EngineLock(job.path.parent).holder() is not None:
        return None
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
    from core import __version__
    from core.devices import engine_versions
    from core.model_folders import weight_manifest

    return {
        "app_version": __version__,
        "packages": engine_versions(),
        "python": sys.version.split()[0],
        "model_manifest": weight_manifest(Path(engine.model)),
    }


def find_job(jobs_dir: Path, input_sha256: str, output_path: str) -> JobFolder | None:
    """The newest job made by ``run`` for this input file content and output path."""
    for job in list_jobs(jobs_dir):
        try:
            spec = job.read_spec()
        except JobUnreadable:  # another job's problem: not this run's
            continue
        if spec.input_sha256 == input_sha256 and spec.output_path == output_path:
            return job
    return None


def list_jobs(jobs_dir: Path) -> list[JobFolder]:
    """Job folders, newest first. On strings (os, not pathlib): every page's rerun and the
    queue's scan list every job of every owner, and pathlib's joins cost more than the
    stats."""
    try:
        names = os.listdir(jobs_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    base = os.fspath(jobs_dir)
    kept = [n for n in names if os.path.isfile(os.path.join(base, n, "job.json"))]
    return [JobFolder(jobs_dir / name) for name in sorted(kept, reverse=True)]
