"""A job as OpenAI's ``Batch``, read from its folder and kept in memory while the folder's
files are unchanged.

Clients poll ``GET /v1/batches/{id}`` over and over (50 pollers ten times a second is a
normal load): an unchanged job is answered from memory after four ``lstat`` calls, without
reading or parsing a file, so the answer is cheap enough for the server's event loop; a
changed one is read again (``job.json``, ``status.json`` and its history). Never DuckDB.
"""

from __future__ import annotations

import json
import os
import stat
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from core.api.files import Owner, has_lines, job_file_id, owner_of_job, visible
from core.api.keys import Caller
from core.endpoints import CHAT_URL
from core.jobs.folder import JobFolder
from core.jobs.queue import WAITS
from core.jobs.recovery import interrupted_message, wake_worker
from core.jobs.windows import NEXT_RUN_KEY, held_note
from core.schemas import STALE_AFTER_SECONDS, JobSpec, JobStatus

METADATA_VALUE = 512  # OpenAI's longest metadata value
WAITING_KEY = "waiting"  # a batch's metadata key saying why it has not started


class UrlOnly(msgspec.Struct):
    url: Any = None


def _epoch(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        return int(datetime.fromisoformat(iso).timestamp())
    except ValueError:
        return None


def _first(status: JobStatus, *states: str) -> int | None:
    """When the job first entered one of ``states`` (from its history)."""
    for entry in status.history:
        if entry.get("state") in states:
            return _epoch(entry.get("at"))
    return None


def _last(status: JobStatus, *states: str) -> int | None:
    for entry in reversed(status.history):
        if entry.get("state") in states:
            return _epoch(entry.get("at"))
    return None


def waiting_said(status: JobStatus) -> bool:
    """Whether the status says why the job waits to run: for a free place or memory
    beside the running jobs (queued), or for its model's load (loading, with no result
    yet); the words are the worker's, as Monitor and Jobs show them."""
    state = status.state.value
    return (state == "queued" and status.message.startswith(WAITS)) or (
        state == "loading" and status.done == 0 and bool(status.message)
    )


def openai_status(status: JobStatus) -> str:
    """The job's state in OpenAI's terms: waiting for the engine is still ``validating``
    (nothing has run), and a run whose every request has its result is ``finalizing``."""
    state = status.state.value
    if status.interrupted:  # its worker died: it resumes (core.jobs.recovery), or fails
        return "in_progress"
    if state == "queued" and status.runs:  # queued again to resume: it has run
        return "in_progress"
    if state in ("created", "queued", "awaiting_approval"):  # nothing has run
        return "validating"
    if state in ("loading", "running"):
        if status.total and status.done >= status.total:
            return "finalizing"
        return "in_progress"
    return state  # cancelling, completed, failed, cancelled, expired: OpenAI's own words


def _endpoint(job: JobFolder, spec: JobSpec) -> str:
    """The batch's endpoint: what it was made with, else the first line's ``url``."""
    if spec.batch is not None:
        return spec.batch.endpoint
    try:
        with job.input.open("rb") as handle:
            for raw in handle:
                if raw.strip():
                    url = msgspec.json.decode(raw, type=UrlOnly).url
                    return url if isinstance(url, str) and url else CHAT_URL
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        pass
    return CHAT_URL


def _errors(code: str, message: str) -> dict:
    return {
        "object": "list",
        "data": [{"code": code, "line": None, "message": message, "param": None}],
    }


def _named(name: str) -> dict[str, str]:
    return {"name": name[:METADATA_VALUE]} if name else {}


def batch_of(job: JobFolder) -> dict:
    """A job as OpenAI's ``Batch``.

    Raises:
        JobUnreadable: its ``job.json`` or ``status.json`` cannot be read.
    """
    spec, status = job.read_spec(), job.read_status()
    created = _epoch(spec.created_at) or 0
    hours = spec.completion_window_hours
    state = openai_status(status)
    final = status.is_final
    ended = _epoch(status.finished_at) or _last(status, state)
    batch: dict[str, Any] = {
        "id": job.job_id,
        "object": "batch",
        "endpoint": _endpoint(job, spec),
        "errors": None,
        "input_file_id": (spec.batch.input_file_id if spec.batch else "")
        or job_file_id(job.job_id, "input"),
        "completion_window": spec.batch.completion_window if spec.batch else "24h",
        "status": state,
        "created_at": created,
        "in_progress_at": _first(status, "loading", "running"),
        "expires_at": created + int(hours * 3600) if hours else None,
        "finalizing_at": ended if state == "completed" else None,
        "completed_at": ended if state == "completed" else None,
        "failed_at": ended if state == "failed" else None,
        "expired_at": ended if state == "expired" else None,
        # A cancel while the model loads stops at once, with no `cancelling` in between.
        "cancelling_at": (_first(status, "cancelling") or ended)
        if state.startswith("cancel")
        else None,
        "cancelled_at": ended if state == "cancelled" else None,
        "request_counts": {
            "total": status.total or spec.input_lines,
            "completed": status.succeeded,
            "failed": status.failed,
        },
        # A batch echoes its metadata as sent; a job made elsewhere shows its name there.
        "metadata": dict(spec.metadata) if spec.batch else _named(job.name),
        "model": Path(spec.engine.model).name,
        "usage": {
            "input_tokens": status.prompt_tokens,
            # A reused answer's prompt was not read again: cached, as OpenAI counts it.
            "input_tokens_details": {"cached_tokens": status.reused_prompt_tokens},
            "output_tokens": status.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": status.prompt_tokens + status.completion_tokens,
        },
    }
    if status.state == "awaiting_approval":  # why it waits, the estimate and who asked
        batch["metadata"]["approval"] = status.message[:METADATA_VALUE]
    if waiting_said(status):  # OpenAI's object has no field for why a batch waits
        batch["metadata"][WAITING_KEY] = status.message[:METADATA_VALUE]
    held = held_note(spec, status)
    if held:  # outside its run windows: still validating (or in_progress if it has run)
        batch["metadata"][NEXT_RUN_KEY] = held[:METADATA_VALUE]
    if state == "failed" and status.error:
        batch["errors"] = _errors("job_failed", status.error)
    elif status.interrupted:  # what happens meanwhile, and a worker woken to do it
        batch["errors"] = _errors("worker_stopped", interrupted_message(status.interruptions))
        wake_worker(job.path.parent)
    # A result file is named only once the batch has ended and only when it holds lines:
    # a client reads output_file_id as "done, download this" (never an empty string).
    if final and has_lines(job.output):
        batch["output_file_id"] = job_file_id(job.job_id, "output")
    if final and has_lines(job.errors):
        batch["error_file_id"] = job_file_id(job.job_id, "errors")
    return batch


# What a job's answer is made from, as ``lstat`` sees it: the folder (a file added, removed
# or replaced, as ``status.json`` is at every update, changes its times) and the files read
# in place; each with the kind of file the studio makes there.
_STAMPED = (("", stat.S_ISDIR), ("job.json", stat.S_ISREG), ("status.json", stat.S_ISREG))
_STAMPED += (("name.txt", stat.S_ISREG),)


def _stamp(folder: str) -> tuple | None:
    """The job folder's stamp (see ``_STAMPED``); None when a file there is not what the
    studio makes (the full read then says why)."""
    stamp = []
    for name, kind in _STAMPED:
        try:
            info = os.lstat(os.path.join(folder, name) if name else folder)
        except FileNotFoundError:
            stamp.append(None)
            continue
        except OSError:
            return None
        if not kind(info.st_mode):
            return None
        stamp.append((info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_size))
    return tuple(stamp)


def body_of(batch: dict) -> bytes:
    """A ``Batch`` as the response body, byte for byte what ``JSONResponse`` sends."""
    return json.dumps(
        batch, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode()


# Job folder -> (stamp, owner, batch, its body): a poll of an unchanged job costs four lstat
# calls, not two files parsed nor a dict serialized (what 50 clients polling a running batch
# ask over and over).
_ANSWERS: dict[str, tuple[tuple, Owner, dict, bytes]] = {}
ANSWERS_KEPT = 4_096


def answer(job: JobFolder) -> tuple[Owner, dict]:
    """The job's owner and its ``Batch``, from the cache while its files are unchanged.

    Raises:
        JobUnreadable: ``job.json`` or ``status.json`` cannot be read.
    """
    folder = str(job.path)
    stamp = _stamp(folder)
    kept = _ANSWERS.get(folder)
    if stamp is not None and kept is not None and kept[0] == stamp and not _stale(kept):
        return kept[1], kept[2]
    owner, batch = owner_of_job(job.read_spec()), batch_of(job)
    if stamp is not None and stamp == _stamp(folder):  # not changed while it was read
        if len(_ANSWERS) >= ANSWERS_KEPT:
            _ANSWERS.clear()
        _ANSWERS[folder] = (stamp, owner, batch, body_of(batch))
    return owner, batch


def kept_body(home: Path, batch_id: str, caller: Caller | None) -> bytes | None:
    """The batch's response body from memory when its job's files are unchanged since it
    was read (no file read: safe on the server's event loop); None when
    :func:`core.api.batches.get_batch` must read them, or say it is not the caller's.
    """
    if not batch_id.startswith("job_") or "/" in batch_id or "\\" in batch_id:
        return None
    folder = os.path.join(home, "jobs", batch_id)
    kept = _ANSWERS.get(folder)
    if kept is None or kept[0] != _stamp(folder) or _stale(kept) or not visible(kept[1], caller):
        return None
    return kept[3]


def _stale(kept: tuple) -> bool:
    """A running batch whose ``status.json`` has not changed for longer than a heartbeat
    may: its worker may have died, which no file says (read it again)."""
    status_stamp = kept[0][2]
    if kept[2]["status"] not in RUNNING or status_stamp is None:
        return False
    return time.time() - status_stamp[1] / 1e9 > STALE_AFTER_SECONDS


RUNNING = frozenset({"in_progress", "finalizing", "cancelling"})
