"""Jobs as Anthropic's Message Batches (``/v1/messages/batches``).

A message batch is a job like any other: its requests become the chat lines the product
runs (core/api/anthropic_shapes.py), made by the same :func:`core.jobs.submit.submit` (its
check, its quotas) and run by the same worker; the job records that this API made it
(``BatchOrigin.api``). Every job a caller sees is a message batch here and a batch on
``/v1/batches``, under one id; its results are read from the job's result files and
translated line by line, as Anthropic writes them.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from core.api import anthropic_shapes as shapes
from core.api.batch_view import answer
from core.api.batches import visible_job
from core.api.errors import ApiError
from core.api.files import disk_full, visible
from core.api.keys import Caller
from core.config import default_model_dir
from core.endpoints import CHAT_URL
from core.jobs.folder import JobFolder, JobUnreadable, StillRunning, cancel, delete_job, list_jobs
from core.jobs.submit import OverQuota, Refused, Submission, submit
from core.model_names import studio_model_map
from core.schemas import BatchOrigin, EngineConfig, JobStatus

WINDOW_HOURS = 24.0  # Anthropic's: a batch expires 24 hours after its creation
LIST_LIMIT_MAX = 1_000


def _rfc3339(iso: str | None) -> str | None:
    if not iso:
        return None
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _at(status: JobStatus, *states: str) -> str | None:
    """When the job first entered one of ``states`` (from its history)."""
    for entry in status.history:
        if entry.get("state") in states:
            return _rfc3339(entry.get("at"))
    return None


def processing_status(status: JobStatus) -> str:
    """The job's state in Anthropic's three words."""
    if status.is_final:
        return "ended"
    return "canceling" if status.state.value == "cancelling" else "in_progress"


def results_url(base_url: str, batch_id: str) -> str:
    return f"{base_url.rstrip('/')}/v1/messages/batches/{batch_id}/results"


def message_batch(job: JobFolder, base_url: str) -> dict[str, Any]:
    """A job as Anthropic's ``MessageBatch``. Its counts are all ``processing`` until it
    ends, then each request's outcome, as Anthropic counts them.

    Raises:
        JobUnreadable: its ``job.json`` or ``status.json`` cannot be read.
    """
    spec, status = job.read_spec(), job.read_status()
    created = datetime.fromisoformat(spec.created_at).astimezone(UTC)
    state = processing_status(status)
    ended = _rfc3339(status.finished_at) if state == "ended" else None
    total = status.total or spec.input_lines
    counts = {"processing": total, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    if state == "ended":
        counts = {"processing": 0, **_counts(job, status)}
    hours = spec.completion_window_hours or WINDOW_HOURS
    canceled = status.state.value in ("cancelling", "cancelled")
    return {
        "id": job.job_id,
        "type": "message_batch",
        "processing_status": state,
        "request_counts": counts,
        "ended_at": ended,
        "created_at": created.isoformat().replace("+00:00", "Z"),
        "expires_at": datetime.fromtimestamp(created.timestamp() + hours * 3600, UTC)
        .isoformat()
        .replace("+00:00", "Z"),
        "archived_at": None,
        # A cancel before the engine took the job ends it at once, with no cancelling.
        "cancel_initiated_at": (_at(status, "cancelling") or ended) if canceled else None,
        "results_url": results_url(base_url, job.job_id) if state == "ended" else None,
    }


# -- results -------------------------------------------------------------------------------


class _Error(msgspec.Struct):
    code: Any = None
    message: Any = None


class _Response(msgspec.Struct):
    status_code: Any = None
    body: Any = None


class _Line(msgspec.Struct):
    custom_id: Any = None
    response: _Response | None = None
    error: _Error | None = None


class _Body(msgspec.Struct):
    stop: Any = None


class _Request(msgspec.Struct):
    custom_id: Any = None
    body: _Body | None = None


def _lines(path: Path, kind: type) -> Iterator[Any]:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        for raw in handle:
            if raw.strip():
                yield msgspec.json.decode(raw, type=kind)


def _outcomes(job: JobFolder, status: JobStatus, translate: bool) -> Iterator[tuple[str, dict]]:
    """Each request's outcome kind and (``translate``) its result line: the answers, then
    the failures of requests without one, then the requests with neither (cancelled,
    expired, or left when the job failed). A request retried after a failure counts once,
    by its answer.

    Raises:
        msgspec.DecodeError: a damaged result line.
    """
    stops: dict[str, list[str]] = {}
    order: list[str] = []
    for request in _lines(job.input, _Request):
        order.append(str(request.custom_id))
        stop = request.body.stop if request.body is not None else None
        if stop:
            stops[str(request.custom_id)] = [stop] if isinstance(stop, str) else list(stop)
    done: set[str] = set()
    for line in _lines(job.output, _Line):
        custom_id, response = str(line.custom_id), line.response
        if response is None or response.status_code != 200 or not response.body:
            continue  # a failure written to the output: the errors' pass reads it
        done.add(custom_id)
        if not translate:
            yield custom_id, {"type": "succeeded"}
        elif _is_chat(response.body):
            message = shapes.message_of(response.body, stops.get(custom_id, []))
            yield custom_id, shapes.succeeded(custom_id, message)
        else:  # a line of another endpoint (an OpenAI batch of embeddings...): no Message
            yield (
                custom_id,
                shapes.errored(
                    custom_id,
                    f"this request ran {job.job_id}'s other endpoint, not {CHAT_URL}",
                    400,
                ),
            )
    for path in (job.output, job.errors):
        for line in _lines(path, _Line):
            custom_id = str(line.custom_id)
            if custom_id in done or (line.error is None and line.response is None):
                continue
            if line.response is not None and line.response.status_code == 200:
                continue
            done.add(custom_id)
            code = str(line.error.code) if line.error is not None else ""
            if code in ("cancelled", "expired"):
                kind = "canceled" if code == "cancelled" else "expired"
                yield custom_id, shapes.not_run(custom_id, kind)  # type: ignore[arg-type]
                continue
            message = str(line.error.message) if line.error is not None else "the request failed"
            status_code = line.response.status_code if line.response is not None else 500
            yield custom_id, shapes.errored(custom_id, message, int(status_code or 500))
    state = status.state.value
    for custom_id in order:
        if custom_id in done:
            continue
        if state in ("cancelled", "expired"):
            kind = "canceled" if state == "cancelled" else "expired"
            yield custom_id, shapes.not_run(custom_id, kind)  # type: ignore[arg-type]
        else:
            why = status.error or f"the job ended {state} before this request ran"
            yield custom_id, shapes.errored(custom_id, why, 500)


def _is_chat(body: Any) -> bool:
    return isinstance(body, dict) and body.get("object") == "chat.completion"


def _kind(result: dict) -> str:
    return result["result"]["type"] if "result" in result else result["type"]


_COUNTS: dict[str, tuple[tuple, dict[str, int]]] = {}


def _counts(job: JobFolder, status: JobStatus) -> dict[str, int]:
    """An ended job's outcomes by kind, kept while its result files are unchanged."""
    stamp = tuple(_stamp(p) for p in (job.status_file, job.output, job.errors))
    kept = _COUNTS.get(str(job.path))
    if kept is not None and kept[0] == stamp:
        return kept[1]
    try:
        found = Counter(_kind(r) for _, r in _outcomes(job, status, translate=False))
    except msgspec.DecodeError:  # a damaged line: the results say which (500 file_damaged)
        found = Counter()
    counts = {k: found[k] for k in ("succeeded", "errored", "canceled", "expired")}
    _COUNTS[str(job.path)] = (stamp, counts)
    return counts


def _stamp(path: Path) -> tuple | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)


def results(home: Path, batch_id: str, caller: Caller | None) -> Iterator[bytes]:
    """An ended batch's results, a JSON line each (``{custom_id, result}``).

    Raises:
        ApiError: 404 when the caller sees no such batch, 400 while it has not ended.
    """
    job = visible_job(home, batch_id, caller)
    status = _status(job, batch_id)
    if not status.is_final:
        raise ApiError(
            400,
            f"Batch {batch_id} is {processing_status(status)}: its results are ready once "
            "its processing_status is ended.",
        )

    def lines() -> Iterator[bytes]:
        try:
            for _, result in _outcomes(job, status, translate=True):
                yield json.dumps(result, ensure_ascii=False).encode() + b"\n"
        except msgspec.DecodeError as exc:  # the stream has begun: end it, and say so in the log
            raise RuntimeError(f"batch {batch_id} has a damaged result line: {exc}") from None

    return lines()


def _status(job: JobFolder, batch_id: str) -> JobStatus:
    try:
        return job.read_status()
    except JobUnreadable as exc:
        raise ApiError(404, f"Batch {batch_id} cannot be read: {exc.reason}.") from None


# -- the endpoints' work -------------------------------------------------------------------


def get(home: Path, batch_id: str, caller: Caller | None, base_url: str) -> dict[str, Any]:
    job = visible_job(home, batch_id, caller)
    try:
        return message_batch(job, base_url)
    except JobUnreadable as exc:
        raise ApiError(404, f"Batch {batch_id} cannot be read: {exc.reason}.") from None


def listing(
    home: Path,
    caller: Caller | None,
    base_url: str,
    limit: int,
    before_id: str | None,
    after_id: str | None,
) -> dict[str, Any]:
    """A page of the caller's batches, newest first, by Anthropic's cursors: ``after_id``
    the page after that batch (older ones), ``before_id`` the page before it (newer)."""
    if before_id is not None and after_id is not None:
        raise ApiError(400, "Give before_id or after_id, not both.")
    found: list[tuple[str, str, JobFolder]] = []
    for job in list_jobs(home / "jobs"):
        try:
            owner, _ = answer(job)
            if visible(owner, caller):  # by the creation's milliseconds: a burst keeps its order
                found.append((job.read_spec().created_at, job.job_id, job))
        except JobUnreadable:
            continue  # that job's problem: the Jobs page names it
    found.sort(key=lambda item: (item[0], item[1]), reverse=True)
    jobs = [job for _, _, job in found]
    ids = [job.job_id for job in jobs]
    cursor = before_id if before_id is not None else after_id
    if cursor is not None and cursor not in ids:
        which = "before_id" if before_id is not None else "after_id"
        raise ApiError(400, f"{which} names no batch you can see: {cursor[:80]!r}.", which)
    if before_id is not None:
        end = ids.index(before_id)
        page, has_more = jobs[max(0, end - limit) : end], end > limit
    else:
        start = ids.index(after_id) + 1 if after_id is not None else 0
        page, has_more = jobs[start : start + limit], len(jobs) > start + limit
    data = []
    for job in page:
        try:
            data.append(message_batch(job, base_url))
        except JobUnreadable:
            continue
    return {
        "data": data,
        "has_more": has_more,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


def create(home: Path, body: Any, caller: Caller | None, base_url: str) -> dict[str, Any]:
    """Checks the requests, writes them as the chat lines a job runs and makes the job with
    :func:`submit`; returns the batch. A request the check refuses refuses the batch (400,
    naming its custom_id and field), as Anthropic validates a batch before it runs.

    Raises:
        ApiError: 400 for a body or request that cannot run, 429 over a quota, 507 for a
            full disk (nothing kept).
    """
    try:
        parsed = shapes.read_create(body)
    except shapes.ShapeProblem as problem:
        raise ApiError(400, str(problem), problem.field) from None
    submission = Submission(
        engine=EngineConfig(model=str(default_model_dir())),
        model_map=studio_model_map(home),
        source="message-batch.jsonl",
        owner=caller.name if caller is not None else None,
        owner_key=caller.key_id if caller is not None else None,
        batch=BatchOrigin(endpoint=CHAT_URL, api="anthropic"),
        completion_window_hours=WINDOW_HOURS,
    )
    home.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(dir=home, prefix=".message-batch-") as folder:
            lines = home / folder / "message-batch.jsonl"
            with lines.open("w", encoding="utf-8") as handle:
                for request in parsed.requests:
                    handle.write(json.dumps(shapes.chat_line(request), ensure_ascii=False) + "\n")
            started = submit(lines, submission, home / "jobs")  # the job keeps its own copy
    except OSError as exc:
        raise disk_full(exc, "the batch was not created", "create it again", None) or exc from None
    except OverQuota as over:
        raise ApiError(429, "; ".join(over.problems)) from None
    except Refused as refused:
        raise _refusal(refused, parsed) from None
    return message_batch(started.job, base_url)


def _refusal(refused: Refused, parsed: shapes.CreateBody) -> ApiError:
    """The check's first problem with a request, named by its custom_id and field."""
    errors = refused.report.errors if refused.report is not None else []
    for problem in errors:
        if 0 < problem.line <= len(parsed.requests):
            index = problem.line - 1
            custom_id = parsed.requests[index].custom_id
            field = shapes.anthropic_field(problem.param)
            more = f" (and {len(errors) - 1:,} more problems)" if len(errors) > 1 else ""
            message = shapes.anthropic_words(problem.message)
            return ApiError(
                400,
                f"requests[{index}] (custom_id {custom_id!r}): {field}: {message}{more}",
                f"requests[{index}].{field}",
            )
    return ApiError(400, "; ".join(shapes.anthropic_words(p) for p in refused.problems))


def cancel_batch(home: Path, batch_id: str, caller: Caller | None, base_url: str) -> dict:
    """Cancels as the app's cancel does: ``canceling`` while the engine stops, then ended
    with the results written kept and the rest ``canceled``."""
    job = visible_job(home, batch_id, caller)
    status = _status(job, batch_id)
    if status.is_final:
        raise ApiError(400, f"Batch {batch_id} has ended: there is nothing to cancel.")
    cancel(job)
    batch = get(home, batch_id, caller, base_url)
    if batch["processing_status"] == "in_progress":
        # The worker writes `cancelling` when it takes the signal; the client is told now.
        batch["processing_status"] = "canceling"
        batch["cancel_initiated_at"] = _rfc3339(datetime.now(UTC).isoformat())
    return batch


def delete(home: Path, batch_id: str, caller: Caller | None) -> dict:
    """Deletes an ended batch and its job (every page forgets it), as Anthropic deletes
    one: a batch still processing must be cancelled first."""
    job = visible_job(home, batch_id, caller)
    try:
        delete_job(job)
    except StillRunning:
        raise ApiError(
            400, f"Batch {batch_id} is still processing: cancel it, then delete it once ended."
        ) from None
    except JobUnreadable as exc:
        raise ApiError(404, f"Batch {batch_id} cannot be read: {exc.reason}.") from None
    return {"id": batch_id, "type": "message_batch_deleted"}
