"""Files: what clients upload (streamed to disk), and the files of jobs.

Uploads live in ``files/`` in the data folder: ``<id>.jsonl`` (the bytes as sent) and
``<id>.json`` (a :class:`FileRecord`). A job's files are not copied: its input, output and
error files are named ``file-<job_id>-input`` / ``-output`` / ``-errors`` and read from the
job folder, so they are always what the worker wrote.

An upload is parsed as it arrives (python-multipart's streaming parser over the request's
body stream): the ``file`` part goes straight into a temporary file beside its final
place, so a 200 MB upload costs the server a few chunks of memory, never the file.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from pydantic import BaseModel
from python_multipart.multipart import MultipartParseError, MultipartParser, parse_options_header

from core.api.errors import ApiError, not_found
from core.files import file_atomic, write_atomic
from core.jobs.folder import JobFolder, JobUnreadable
from core.jobs.ledger import combined_lines

MAX_UPLOAD_ENV = "BATCH_STUDIO_API_MAX_UPLOAD_MB"
DEFAULT_MAX_UPLOAD_MB = 200  # OpenAI's limit for a batch file
UPLOAD_PURPOSES = ("batch", "user_data")  # what a batch reads (others are refused: say so)
FILENAME_MAX = 255
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

    def openai(self) -> dict:
        """The file as OpenAI's ``FileObject``."""
        return file_object(self.id, self.bytes, self.created_at, self.filename, self.purpose)


def file_object(ident: str, size: int, created_at: int, filename: str, purpose: str) -> dict:
    return {
        "id": ident,
        "object": "file",
        "bytes": size,
        "created_at": created_at,
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
        "expires_at": None,
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


def visible(owner_of_thing: str | None, caller: str | None) -> bool:
    """Whether a caller sees a file or batch: this machine's user (None) sees all, a key
    only what was made with it."""
    return caller is None or owner_of_thing == caller


# -- uploads -------------------------------------------------------------------------------


@dataclass
class _Form:
    """What the streaming parser has read so far; the file part goes into ``out``."""

    out: BinaryIO
    limit: int
    purpose: bytearray = field(default_factory=bytearray)
    filename: str | None = None
    size: int = 0
    _name: str | None = None
    _header_field: bytearray = field(default_factory=bytearray)
    _header_value: bytearray = field(default_factory=bytearray)
    _headers: dict[str, str] = field(default_factory=dict)

    def callbacks(self) -> dict:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": lambda d, s, e: self._header_field.extend(d[s:e]),
            "on_header_value": lambda d, s, e: self._header_value.extend(d[s:e]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
        }

    def _part_begin(self) -> None:
        self._headers, self._name = {}, None

    def _header_end(self) -> None:
        name = self._header_field.decode("latin-1").strip().lower()
        self._headers[name] = self._header_value.decode("utf-8", "replace")
        self._header_field.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get("content-disposition", ""))
        self._name = options.get(b"name", b"").decode("utf-8", "replace")
        if self._name == "file":
            if self.filename is not None:
                raise ApiError(400, "Send one file per upload.", param="file")
            raw = options.get(b"filename", b"").decode("utf-8", "replace")
            self.filename = Path(raw.replace("\\", "/")).name[:FILENAME_MAX] or "upload.jsonl"

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._name == "file":
            self.size += end - start
            if self.size > self.limit:
                raise ApiError(
                    400,
                    f"The file is larger than this server's limit of {self.limit:,} bytes "
                    f"(set {MAX_UPLOAD_ENV} to change it); split it into smaller batches.",
                    param="file",
                    code="file_too_large",
                )
            self.out.write(data[start:end])
        elif self._name == "purpose" and len(self.purpose) < 100:
            self.purpose.extend(data[start:end])


async def receive_upload(
    home: Path, content_type: str, body: AsyncIterator[bytes], owner: str | None
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
    try:
        # The content appears only once the whole form is read and valid.
        with file_atomic(content_path(home, file_id)) as out:
            form = _Form(out, max_upload_bytes())
            parser = MultipartParser(boundary, form.callbacks())
            async for chunk in body:
                parser.write(chunk)
            parser.finalize()
            purpose = _purpose(form)
    except MultipartParseError as exc:
        raise ApiError(400, f"The multipart form cannot be read: {exc}.") from None
    record = FileRecord(
        id=file_id,
        bytes=form.size,
        created_at=int(time.time()),
        filename=form.filename or "upload.jsonl",
        purpose=purpose,
        owner=owner,
    )
    write_atomic(_record_path(home, file_id), record.model_dump_json(indent=1))
    return record


def _purpose(form: _Form) -> str:
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


# -- reading and deleting ------------------------------------------------------------------


def read_record(home: Path, file_id: str) -> FileRecord | None:
    """An uploaded file's record; None when there is none (or the id is not one of ours)."""
    if not _UPLOAD_ID.match(file_id):
        return None
    try:
        return FileRecord.model_validate_json(_record_path(home, file_id).read_bytes())
    except (OSError, ValueError):
        return None


def uploaded(home: Path, caller: str | None) -> list[FileRecord]:
    """The uploads a caller sees, newest first."""
    folder = files_dir(home)
    if not folder.is_dir():
        return []
    records = (read_record(home, p.stem) for p in folder.glob("file-*.json"))
    seen = [r for r in records if r is not None and visible(r.owner, caller)]
    return sorted(seen, key=lambda r: (r.created_at, r.id), reverse=True)


def delete_upload(home: Path, file_id: str, caller: str | None) -> None:
    record = read_record(home, file_id)
    if record is None or not visible(record.owner, caller):
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


def job_file_object(job: JobFolder, kind: JobFileKind) -> dict:
    """A job's file as OpenAI's ``FileObject`` (``batch_output`` for results)."""
    try:
        spec = job.read_spec()
    except JobUnreadable as exc:
        raise ApiError(404, str(exc)) from None
    size = sum(len(line) for line in job_file_lines(job, kind))
    name = {"input": spec.source or "input.jsonl", "output": "output.jsonl"}.get(
        kind, "errors.jsonl"
    )
    purpose = "batch" if kind == "input" else "batch_output"
    created = _epoch(spec.created_at)
    return file_object(job_file_id(job.job_id, kind), size, created, name, purpose)


def _epoch(iso: str) -> int:
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(iso).timestamp())
    except ValueError:
        return 0
