"""Jobs as OpenAI batches.

A batch is a job: ``POST /v1/batches`` makes one with the same :func:`core.jobs.submit.submit`
as the Run page, the CLI and the inbox, and every job appears in ``GET /v1/batches``, its
id the job's id. Its state is read from the job folder (``job.json``, ``status.json`` and
its history), so the API answers without DuckDB and without waiting for the app.

OpenAI validates a whole file before it runs any line: a file with an invalid line, or a
line whose ``url`` is not the batch's ``endpoint``, fails the batch at validation with an
error per line. Such a batch made no job; it is kept as a record in ``batches/``, so a
client that polls it reads ``failed`` and its errors.
"""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from core.api.batch_view import METADATA_VALUE, UrlOnly, answer, batch_of, openai_status
from core.api.errors import ApiError, not_found
from core.api.files import (
    FileRecord,
    Owner,
    content_path,
    disk_full,
    expires_after,
    owner_of_job,
    read_record,
    visible,
)
from core.api.keys import Caller
from core.check import check_file
from core.config import default_model_dir
from core.endpoints import BATCH_API_URLS
from core.files import write_atomic
from core.jobs.folder import JobFolder, JobUnreadable, cancel, list_jobs
from core.jobs.submit import OverQuota, Refused, Submission, submit
from core.jobs.windows import METADATA_KEY as WINDOWS_KEY
from core.model_names import studio_model_map
from core.schemas import BatchOrigin, EngineConfig

ENDPOINTS = BATCH_API_URLS
COMPLETION_WINDOWS = {"24h": 24.0}
METADATA_PAIRS, METADATA_KEY = 16, 64  # OpenAI's limits (METADATA_VALUE: batch_view)
# metadata.reuse: whether deterministic requests take answers already made (core/reuse);
# absent: the studio's default (core.config.reuse_default).
REUSE_VALUES = {"true": True, "false": False}
LISTED_ERRORS = 1_000  # errors.data entries of a failed validation
_BATCH_ID = "batch_"


# -- batches refused at validation ----------------------------------------------------------


def _refused_dir(home: Path) -> Path:
    return home / "batches"


def _refused_path(home: Path, batch_id: str) -> Path | None:
    if not batch_id.startswith(_BATCH_ID) or not batch_id[len(_BATCH_ID) :].isalnum():
        return None
    return _refused_dir(home) / f"{batch_id}.json"


class RefusedBatch(msgspec.Struct):
    """A batch that failed validation and so made no job: its answer and its owner."""

    batch: dict[str, Any]
    owner: str | None = None  # the key's name
    owner_key: str | None = None  # the key's id (None: no key, or refused before ids)

    def ownership(self) -> Owner:
        # Only a key's batch has an owner, so a name without an id is one from before ids.
        legacy = self.owner_key is None and self.owner is not None
        return Owner(self.owner_key, self.owner, int(self.batch.get("created_at") or 0), legacy)


def _read_refused(path: Path) -> RefusedBatch | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=RefusedBatch)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _refuse(
    home: Path, request: dict[str, Any], errors: list[dict[str, Any]], owner: Caller | None
) -> dict:
    now = int(time.time())
    batch = {
        "id": f"{_BATCH_ID}{secrets.token_hex(12)}",
        "object": "batch",
        "endpoint": request["endpoint"],
        "errors": {"object": "list", "data": errors[:LISTED_ERRORS]},
        "input_file_id": request["input_file_id"],
        "completion_window": request["completion_window"],
        "status": "failed",
        "created_at": now,
        "failed_at": now,
        "expires_at": now + 24 * 3600,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "metadata": request["metadata"],
    }
    path = _refused_path(home, batch["id"])
    assert path is not None
    name, key = (owner.name, owner.key_id) if owner is not None else (None, None)
    write_atomic(path, msgspec.json.encode(RefusedBatch(batch, name, key)))
    return batch


def refused_batches(home: Path, caller: Caller | None = None) -> list[dict[str, Any]]:
    """The batches that failed validation a caller sees (None: this machine's user, every
    one), as the API answers them, newest first. They made no job, so the Jobs page and
    ``core jobs list`` show them from here, beside the jobs."""
    folder = _refused_dir(home)
    found = []
    for path in folder.glob(f"{_BATCH_ID}*.json") if folder.is_dir() else ():
        refused = _read_refused(path)
        if refused is not None and visible(refused.ownership(), caller):
            found.append(refused.batch)
    return sorted(found, key=lambda b: (b["created_at"], b["id"]), reverse=True)


def refusal_reason(batch: dict[str, Any]) -> str:
    """Why a batch failed validation, in one line: how many errors, and the first."""
    errors = (batch.get("errors") or {}).get("data") or []
    if not errors:
        return "failed validation"
    first = errors[0]
    where = f"line {first['line']}: " if first.get("line") else ""
    at_least = "at least " if len(errors) >= LISTED_ERRORS else ""  # the list is cut there
    more = f" (and {at_least}{len(errors) - 1:,} more)" if len(errors) > 1 else ""
    return f"failed validation: {where}{first.get('message', '')}{more}"


def refused_rows(home: Path) -> list[dict[str, Any]]:
    """Every batch that failed validation as a row beside the jobs (``core jobs list``,
    the Jobs page): no job id, its batch id, name, state, reason, 0 requests, when."""
    return [
        {
            "job_id": None,
            "batch_id": batch["id"],
            "name": str((batch.get("metadata") or {}).get("name") or ""),
            "state": "failed",
            "reason": refusal_reason(batch),
            "requests": 0,
            "created_at": datetime.fromtimestamp(batch["created_at"], UTC).isoformat(),
        }
        for batch in refused_batches(home)
    ]


# -- reading --------------------------------------------------------------------------------


def get_batch(home: Path, batch_id: str, caller: Caller | None) -> dict:
    """One batch the caller may see (what clients poll: answered from files, never
    DuckDB, and from memory while the job's files are unchanged).

    Raises:
        ApiError: 404 when there is none.
    """
    refused_path = _refused_path(home, batch_id)
    if refused_path is not None:
        refused = _read_refused(refused_path)
        if refused is not None and visible(refused.ownership(), caller):
            return refused.batch
        raise not_found("batch", batch_id)
    job = _job_folder(home, batch_id)
    try:
        owner, batch = answer(job)
    except JobUnreadable as exc:
        visible_job(home, batch_id, caller)  # 404 as "no such batch" unless the caller may see it
        raise ApiError(404, f"Batch {batch_id} cannot be read: {exc.reason}.") from None
    if not visible(owner, caller):
        raise not_found("batch", batch_id)
    return dict(batch)  # a copy: the kept answer is never changed by a caller


def _job_folder(home: Path, batch_id: str) -> JobFolder:
    if not batch_id.startswith("job_") or "/" in batch_id or "\\" in batch_id:
        raise not_found("batch", batch_id)
    return JobFolder(home / "jobs" / batch_id)


def visible_job(home: Path, batch_id: str, caller: Caller | None) -> JobFolder:
    """The job of a batch id, if the caller may see it.

    Raises:
        ApiError: 404 when there is none (or it is not the caller's).
    """
    job = _job_folder(home, batch_id)
    try:
        spec = job.read_spec()
    except JobUnreadable:
        raise not_found("batch", batch_id) from None
    if not visible(owner_of_job(spec), caller):
        raise not_found("batch", batch_id)
    return job


def list_batches(home: Path, caller: Caller | None, limit: int, after: str | None) -> dict:
    """A page of the batches a caller sees, newest first (OpenAI's cursor page)."""
    found: list[tuple[int, str, dict]] = []
    for job in list_jobs(home / "jobs"):
        try:
            owner, batch = answer(job)
            if not visible(owner, caller):
                continue
        except JobUnreadable:
            continue  # that job's problem: the Jobs page names it
        found.append((batch["created_at"], batch["id"], dict(batch)))
    found += [(b["created_at"], b["id"], b) for b in refused_batches(home, caller)]
    found.sort(key=lambda item: (item[0], item[1]), reverse=True)
    batches = [b for _, _, b in found]
    if after is not None:
        ids = [b["id"] for b in batches]
        if after not in ids:
            raise ApiError(400, f"'after' names no batch you can see: {after!r}.", "after")
        batches = batches[ids.index(after) + 1 :]
    page = batches[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(batches) > limit,
    }


# -- creating and cancelling ----------------------------------------------------------------


def _request(body: Any) -> dict[str, Any]:
    """The create request, checked field by field (OpenAI's rules, and what runs here)."""
    if not isinstance(body, dict):
        raise ApiError(400, "The body must be a JSON object with input_file_id, endpoint, ...")
    input_file_id = body.get("input_file_id")
    if not isinstance(input_file_id, str) or not input_file_id:
        raise ApiError(
            400, "input_file_id is required: the id of an uploaded file.", "input_file_id"
        )
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise ApiError(
            400,
            f"endpoint {str(endpoint)[:60]!r} is not served here; use one of "
            f"{', '.join(ENDPOINTS)}.",
            "endpoint",
        )
    window = body.get("completion_window")
    if not isinstance(window, str) or window not in COMPLETION_WINDOWS:
        raise ApiError(
            400, f"completion_window must be '24h', not {str(window)[:40]}.", "completion_window"
        )
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict) or len(metadata) > METADATA_PAIRS:
        raise ApiError(400, f"metadata is an object of at most {METADATA_PAIRS} pairs.", "metadata")
    for key, value in metadata.items():
        if len(key) > METADATA_KEY or not isinstance(value, str) or len(value) > METADATA_VALUE:
            raise ApiError(
                400,
                f"metadata keys are at most {METADATA_KEY} characters and values strings of at "
                f"most {METADATA_VALUE}; {key[:70]!r} is not.",
                "metadata",
            )
    seconds = expires_after(body.get("output_expires_after"), "output_expires_after")
    reuse = metadata.get("reuse")  # a string: checked above
    if reuse is not None and reuse.strip().lower() not in REUSE_VALUES:
        raise ApiError(
            400,
            "metadata.reuse is 'true' (answers already made are reused, the default) or "
            f"'false' (every request runs), not {reuse.strip().lower()[:40]!r}.",
            "metadata",
        )
    return {
        "reuse": None if reuse is None else REUSE_VALUES[reuse.strip().lower()],
        "output_expires_after_seconds": seconds,
        "input_file_id": input_file_id,
        "endpoint": endpoint,
        "completion_window": window,
        "metadata": {str(k): v for k, v in metadata.items()},
    }


def _url_mismatches(path: Path, endpoint: str) -> list[dict[str, Any]]:
    """Each line whose ``url`` is not the batch's endpoint (lines that are not JSON are the
    check's to report)."""
    errors = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                url = msgspec.json.decode(raw, type=UrlOnly).url
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if url != endpoint:
                errors.append(
                    {
                        "code": "mismatched_url",
                        "line": number,
                        "message": f"the line's url {str(url)[:80]!r} is not the batch's "
                        f"endpoint {endpoint!r}; a batch runs one endpoint",
                        "param": "url",
                    }
                )
    return errors


def _line_errors(report: Any) -> list[dict[str, Any]]:
    return [
        {"code": p.code, "line": p.line or None, "message": p.message, "param": p.param}
        for p in report.errors
    ]


def create_batch(home: Path, body: Any, caller: Caller | None) -> dict:
    """Validates the request and its file as OpenAI does (all lines or none), then makes
    the job with :func:`submit`; returns the batch.

    Raises:
        ApiError: 400 for a request that is not a batch request, 404 for a file the caller
            cannot see, 429 when the caller's quota has no room for it (core/jobs/quotas.py),
            507 when the disk has no room for the job (nothing of it kept).
            A file with bad lines is not an ApiError: the batch fails.
    """
    request = _request(body)
    record: FileRecord | None = read_record(home, request["input_file_id"])
    if record is None or not visible(record.ownership(), caller):
        raise not_found("file", request["input_file_id"])
    path = content_path(home, record.id)
    errors = _url_mismatches(path, request["endpoint"])
    if errors:
        errors += _line_errors(check_file(path, model_map=studio_model_map(home)))
        errors.sort(key=lambda e: e["line"] or 0)
        return _refuse(home, request, errors, caller)
    submission = Submission(
        engine=EngineConfig(model=str(default_model_dir())),
        model_map=studio_model_map(home),
        source=record.filename,
        owner=caller.name if caller is not None else None,
        owner_key=caller.key_id if caller is not None else None,
        name=request["metadata"].get("name"),
        metadata=request["metadata"],
        batch=BatchOrigin(
            input_file_id=record.id,
            endpoint=request["endpoint"],
            completion_window=request["completion_window"],
            output_expires_after_seconds=request["output_expires_after_seconds"],
        ),
        completion_window_hours=COMPLETION_WINDOWS[request["completion_window"]],
        reuse=request["reuse"],
        run_windows=request["metadata"].get(WINDOWS_KEY),  # None: the owner's or studio's
    )
    try:
        started = submit(path, submission, home / "jobs")
    except OSError as exc:  # submit kept nothing of the job
        raise disk_full(exc, "the batch was not created", "create it again", None) or exc from None
    except OverQuota as over:  # nothing wrong with the batch: it may be created later
        raise ApiError(429, "; ".join(over.problems), code="insufficient_quota") from None
    except Refused as refused:
        if refused.report is not None and refused.report.errors:
            return _refuse(home, request, _line_errors(refused.report), caller)
        problems = [
            {"code": "refused", "line": None, "message": p, "param": None} for p in refused.problems
        ]
        return _refuse(home, request, problems, caller)
    # The worker's Popen is dropped: Python reaps a dropped child when it ends.
    return batch_of(started.job)


def cancel_batch(home: Path, batch_id: str, caller: Caller | None) -> dict:
    """Cancels as the app's cancel does: ``cancelling`` while the engine stops (within
    seconds; the results written stay in the output file), then ``cancelled``."""
    refused_path = _refused_path(home, batch_id)
    if refused_path is not None:
        batch = get_batch(home, batch_id, caller)
        raise ApiError(400, f"Batch {batch_id} is {batch['status']}: there is nothing to cancel.")
    job = visible_job(home, batch_id, caller)
    try:
        status = job.read_status()
        if status.is_final:
            raise ApiError(
                400, f"Batch {batch_id} is {openai_status(status)}: it can no longer be cancelled."
            )
        cancel(job)
        batch = batch_of(job)
    except JobUnreadable as exc:
        raise ApiError(404, f"Batch {batch_id} cannot be read: {exc.reason}.") from None
    if batch["status"] not in ("cancelling", "cancelled"):
        # The worker writes `cancelling` when it takes the signal; the client is told now.
        batch["status"], batch["cancelling_at"] = "cancelling", int(time.time())
    return batch
