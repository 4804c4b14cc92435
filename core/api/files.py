"""Files: what clients upload (streamed to disk), and the files of jobs.

Uploads live in ``files/`` in the data folder: ``<id>.jsonl`` (the bytes as sent) and
``<id>.json`` (a :class:`FileRecord`). A job's files are not copied: its input, output and
error files are named ``file-<job_id>-input`` / ``-output`` / ``-errors`` and read from the
job folder, so they are always what the worker wrote.

A file may expire (an upload's ``expires_after``, a batch's ``output_expires_after``, both
anchored at the file's ``created_at``): from then on it is neither listed nor served, as
if deleted. It is checked on each read; nothing sweeps the files away.

An upload is parsed as it arrives (python-multipart's streaming parser over the request's
body stream): the ``file`` part goes straight into a temporary file beside its final
place, so a 200 MB upload costs the server a few chunks of memory, never the file.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from python_multipart.multipart import MultipartParseError, MultipartParser, parse_options_header

from core.api.errors import ApiError, not_found
from core.api.form import MAX_UPLOAD_ENV, Form, too_large
from core.api.keys import Caller
from core.files import file_atomic, write_atomic
from core.jobs.folder import JobFolder, JobUnreadable, list_jobs
from core.jobs.ledger import combined_lines
from core.jobs.output_file import CorruptLine
from core.schemas import JobSpec

DEFAULT_MAX_UPLOAD_MB = 200  # OpenAI's limit for a batch file
EXPIRES_MIN, EXPIRES_MAX = 3600, 30 * 24 * 3600  # OpenAI's bounds: an hour to 30 days
UPLOAD_PURPOSES = ("batch", "user_data")  # what a batch reads (others are refused: say so)
FORM_OVERHEAD = 1_000_000  # bytes of a form beyond its file: boundaries, headers, fields
_UPLOAD_ID = re.compile(r"^file-[0-9a-f]{24}$")
_JOB_FILE_ID = re.compile(r"^file-(?P<job>job_[0-9A-Za-z_]+)-(?P<kind>input|output|errors)$")
JobFileKind = Literal["input", "output", "errors"]


class FileRecord(BaseModel):
    """An uploaded file as stored beside its bytes (``files/<id>.json``)."""

    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    owner: str | None = None  # the key's name; None: this machine's user
    expires_at: int | None = None  # from the upload's expires_after; None: kept
    owner_key: str | None = None  # the key's id (None: no key, or an upload from before ids)

    def ownership(self) -> Owner:
        # Only a key uploads with an owner, so a name without an id is a key's from before ids.
        legacy = self.owner_key is None and self.owner is not None
        return Owner(self.owner_key, self.owner, self.created_at, legacy)

    def openai(self) -> dict:
        """The file as OpenAI's ``FileObject``."""
        return file_object(
            self.id, self.bytes, self.created_at, self.filename, self.purpose, self.expires_at
        )


def now() -> int:
    """The clock expiry is read against (one place, so a test can move it)."""
    return int(time.time())


def expired(expires_at: int | None) -> bool:
    return expires_at is not None and expires_at <= now()


def expires_after(value: object, param: str) -> int | None:
    """Seconds after ``created_at`` from OpenAI's ``{anchor, seconds}``; None when it is
    not given.

    Raises:
        ApiError: 400 for anything but ``created_at`` and seconds from an hour to 30 days.
    """
    if value is None:
        return None
    anchor = value.get("anchor") if isinstance(value, dict) else None
    seconds = value.get("seconds") if isinstance(value, dict) else None
    if (
        anchor != "created_at"
        or isinstance(seconds, bool)
        or not isinstance(seconds, int)
        or not EXPIRES_MIN <= seconds <= EXPIRES_MAX
    ):
        raise ApiError(
            400,
            f"{param} is {{'anchor': 'created_at', 'seconds': N}} with N from {EXPIRES_MIN} "
            f"(an hour) to {EXPIRES_MAX} (30 days).",
            param,
        )
    return seconds


def file_object(
    ident: str,
    size: int,
    created_at: int,
    filename: str,
    purpose: str,
    expires_at: int | None = None,
) -> dict:
    return {
        "id": ident,
        "object": "file",
        "bytes": size,
        "created_at": created_at,
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
        "expires_at": expires_at,
        "status_details": None,
    }


def max_upload_bytes() -> int:
    """The size limit of one upload: ``BATCH_STUDIO_API_MAX_UPLOAD_MB`` (default 200)."""
    try:
        megabytes = float(os.environ.get(MAX_UPLOAD_ENV, DEFAULT_MAX_UPLOAD_MB))
    except ValueError:
        megabytes = DEFAULT_MAX_UPLOAD_MB
    return int(megabytes * 1_000_000)


def files_dir(home: Path) -> Path:
    return home / "files"


def content_path(home: Path, file_id: str) -> Path:
    return files_dir(home) / f"{file_id}.jsonl"


def _record_path(home: Path, file_id: str) -> Path:
    return files_dir(home) / f"{file_id}.json"


@dataclass(frozen=True)
class Owner:
    """Whose a file or batch is.

    Attributes:
        key: the id of the key that made it; None when no key did, or it was made before
            keys had ids (then ``legacy``).
        name: the key's name (or the user's, for a job made without a key), as shown.
        made_at: when it was made (epoch seconds).
        legacy: made before keys had ids, when only the name said whose it was.
    """

    key: str | None
    name: str | None
    made_at: int
    legacy: bool = False


def visible(owner: Owner, caller: Caller | None) -> bool:
    """Whether a caller sees a file or batch: this machine's user (None) sees all, a key
    only what was made with it, by the key's id, never its name: a key made with a revoked
    key's name sees none of that key's work.

    What was made before keys had ids names its owner only by name. It stays with the key
    of that name only if that key, too, is from before ids and already existed when the
    thing was made; a key made later never inherits it (its holder on this machine sees it).
    """
    if caller is None:
        return True
    if owner.key is not None:
        return owner.key == caller.key_id
    return (
        owner.legacy
        and caller.legacy
        and owner.name == caller.name
        and owner.made_at >= caller.since
    )


# -- uploads -------------------------------------------------------------------------------


def disk_full(
    exc: OSError,
    lost: str = "the upload was not kept",
    again: str = "upload again",
    param: str | None = "file",
) -> ApiError | None:
    """The 507 a full disk gets (None for any other error): what was not kept and what to
    do. Every caller has kept nothing of the request before it answers so."""
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    return ApiError(
        507,
        f"The server's disk is full: {lost}. Free space in its data folder (or ask "
        f"whoever runs it to), then {again}.",
        param,
        "insufficient_storage",
    )


async def receive_upload(
    home: Path, content_type: str, body: AsyncIterator[bytes], owner: Caller | None
) -> FileRecord:
    """Reads a multipart upload (``file`` and ``purpose``) from ``body`` into the files
    folder as it arrives, and records it.

    Raises:
        ApiError: the form is not multipart, malformed, over the size limit, lacks a
            field, or names a purpose a batch cannot read; nothing is kept then.
    """
    kind, options = parse_options_header(content_type or "")
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise ApiError(
            400, "Upload a file as multipart/form-data with fields 'file' and 'purpose'."
        )
    file_id = f"file-{secrets.token_hex(12)}"
    limit = max_upload_bytes()
    try:
        # The content appears only once the whole form is read and valid.
        with file_atomic(content_path(home, file_id)) as out:
            form = Form(out, limit)
            parser = MultipartParser(boundary, form.callbacks())
            received = 0
            async for chunk in body:
                received += len(chunk)
                if received > limit + FORM_OVERHEAD:  # the form's other parts, counted too
                    raise too_large(limit)
                parser.write(chunk)
            parser.finalize()
            if not form.ended:
                raise ApiError(
                    400,
                    "The upload was cut short: the form ends without its closing boundary, "
                    "so the file may be missing lines. Nothing was kept; upload it again.",
                    "file",
                )
            purpose = _purpose(form)
            seconds = _expires_seconds(form)
    except MultipartParseError as exc:
        raise ApiError(400, f"The multipart form cannot be read: {exc}.") from None
    except OSError as exc:
        raise disk_full(exc) or exc from None
    created = now()
    record = FileRecord(
        id=file_id,
        bytes=form.size,
        created_at=created,
        filename=form.filename or "upload.jsonl",
        purpose=purpose,
        owner=owner.name if owner is not None else None,
        owner_key=owner.key_id if owner is not None else None,
        expires_at=created + seconds if seconds is not None else None,
    )
    try:
        write_atomic(_record_path(home, file_id), record.model_dump_json(indent=1))
    except OSError as exc:
        content_path(home, file_id).unlink(missing_ok=True)  # no content without its record
        raise disk_full(exc) or exc from None
    return record


def _purpose(form: Form) -> str:
    """The form's purpose, once it is known to have a file and a purpose a batch reads."""
    purpose = form.purpose.decode("utf-8", "replace").strip()
    if form.filename is None:
        raise ApiError(400, "The form has no 'file' field: attach the JSONL file.", "file")
    if not purpose:
        raise ApiError(400, "The form has no 'purpose' field: send purpose=batch.", "purpose")
    if purpose not in UPLOAD_PURPOSES:
        raise ApiError(
            400,
            f"purpose {purpose[:40]!r} is not served here: this server runs batches, send "
            "purpose=batch.",
            "purpose",
        )
    return purpose


def _expires_seconds(form: Form) -> int | None:
    if not form.expires:
        return None
    anchor, seconds = (
        form.expires.get(f"expires_after[{k}]", bytearray()).decode("utf-8", "replace").strip()
        for k in ("anchor", "seconds")
    )
    # A form's values are text: the seconds are read as a whole number.
    value = {"anchor": anchor, "seconds": int(seconds) if seconds.isdigit() else seconds}
    return expires_after(value, "expires_after")


# -- reading and deleting ------------------------------------------------------------------


def read_record(home: Path, file_id: str) -> FileRecord | None:
    """An uploaded file's record; None when there is none, it has expired, or the id is not
    one of ours."""
    if not _UPLOAD_ID.match(file_id):
        return None
    try:
        record = FileRecord.model_validate_json(_record_path(home, file_id).read_bytes())
    except (OSError, ValueError):
        return None
    return None if expired(record.expires_at) else record


def uploaded(home: Path, caller: Caller | None) -> list[FileRecord]:
    """The uploads a caller sees, newest first."""
    folder = files_dir(home)
    if not folder.is_dir():
        return []
    records = (read_record(home, p.stem) for p in folder.glob("file-*.json"))
    seen = [r for r in records if r is not None and visible(r.ownership(), caller)]
    return sorted(seen, key=lambda r: (r.created_at, r.id), reverse=True)


def delete_upload(home: Path, file_id: str, caller: Caller | None) -> None:
    record = read_record(home, file_id)
    if record is None or not visible(record.ownership(), caller):
        if _JOB_FILE_ID.match(file_id):
            raise ApiError(
                400,
                f"{file_id} is a job's file: it goes when its job is deleted (Jobs page).",
                param="file_id",
            )
        raise not_found("file", file_id)
    _record_path(home, file_id).unlink(missing_ok=True)
    content_path(home, file_id).unlink(missing_ok=True)


def job_file_id(job_id: str, kind: JobFileKind) -> str:
    return f"file-{job_id}-{kind}"


def job_file(jobs_dir: Path, file_id: str) -> tuple[JobFolder, JobFileKind] | None:
    """The job and which of its files an id names; None when it names none."""
    match = _JOB_FILE_ID.match(file_id)
    if not match:
        return None
    job = JobFolder(jobs_dir / match["job"])
    if not job.spec_file.is_file():
        return None
    return job, match["kind"]  # type: ignore[return-value]


def job_file_lines(job: JobFolder, kind: JobFileKind) -> Iterator[bytes]:
    """A job's file as OpenAI serves it: the input as submitted, or each request's final
    success (output) or final failure (errors) line, in input order."""
    if kind == "input":
        with job.input.open("rb") as handle:
            yield from iter(lambda: handle.read(1 << 16), b"")
        return
    yield from combined_lines(job, only="successes" if kind == "output" else "errors")


def owner_of_job(spec: JobSpec) -> Owner:
    """Whose a job is: :attr:`JobSpec.owner_key` and :attr:`JobSpec.owner`. A job whose
    provenance has no ``owner_key`` at all was made before keys had ids."""
    legacy = "owner_key" not in spec.provenance
    return Owner(spec.owner_key, spec.owner, _epoch(spec.created_at), legacy)


def has_lines(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def job_file_expires_at(spec: JobSpec, kind: JobFileKind) -> int | None:
    """When a batch's output or error file expires (its ``output_expires_after``)."""
    seconds = spec.batch.output_expires_after_seconds if spec.batch is not None else None
    if kind == "input" or seconds is None:
        return None
    return _epoch(spec.created_at) + seconds


def job_file_object(job: JobFolder, kind: JobFileKind) -> dict:
    """A job's file as OpenAI's ``FileObject`` (``batch_output`` for results).

    Raises:
        ApiError: 404 when the job cannot be read or the file has expired; 500 naming the
            line when a result line is damaged (never served short).
    """
    try:
        spec = job.read_spec()
    except JobUnreadable as exc:
        raise ApiError(404, str(exc)) from None
    ident = job_file_id(job.job_id, kind)
    expires_at = job_file_expires_at(spec, kind)
    if expired(expires_at):
        raise not_found("file", ident)
    try:
        size = sum(len(line) for line in job_file_lines(job, kind))
    except CorruptLine as exc:  # served short, it would look complete: say so instead
        raise ApiError(
            500,
            f"The {exc.path.name} of batch {job.job_id} is damaged: its line {exc.line_no} "
            f"is not JSON. The operator can check the job with `python -m core verify "
            f"{job.job_id}`.",
            code="file_damaged",
        ) from None
    name = {"input": spec.source or "input.jsonl", "output": "output.jsonl"}.get(
        kind, "errors.jsonl"
    )
    purpose = "batch" if kind == "input" else "batch_output"
    created = _epoch(spec.created_at)
    return file_object(ident, size, created, name, purpose, expires_at)


@dataclass(frozen=True)
class Listed:
    """A file in ``GET /v1/files``: what orders and filters it, and its ``FileObject``
    (made only for the page shown: a result file's size is read from its lines)."""

    id: str
    created_at: int
    purpose: str
    object: Callable[[], dict]


def listed_files(home: Path, caller: Caller | None) -> list[Listed]:
    """The files a caller sees, newest first: the uploads, and the output and error files
    of the batches that ended with lines in them (``batch_output``, as OpenAI lists
    them), less what has expired."""
    found = [Listed(r.id, r.created_at, r.purpose, r.openai) for r in uploaded(home, caller)]
    for job in list_jobs(home / "jobs"):
        try:
            spec, status = job.read_spec(), job.read_status()
        except JobUnreadable:
            continue  # that job's problem: the Jobs page names it
        if not status.is_final or not visible(owner_of_job(spec), caller):
            continue
        kinds: tuple[tuple[JobFileKind, Path], ...] = (
            ("output", job.output),
            ("errors", job.errors),
        )
        for kind, path in kinds:
            if has_lines(path) and not expired(job_file_expires_at(spec, kind)):
                ident = job_file_id(job.job_id, kind)
                made = partial(job_file_object, job, kind)
                found.append(Listed(ident, _epoch(spec.created_at), "batch_output", made))
    return sorted(found, key=lambda f: (f.created_at, f.id), reverse=True)


def _epoch(iso: str) -> int:
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(iso).timestamp())
    except ValueError:
        return 0
