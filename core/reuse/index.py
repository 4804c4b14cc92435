"""Where each job's answers lie by key: a file beside its output, read at a job's start.

``reuse.v2.keys`` holds one fixed-size record per answer the job wrote to ``output.jsonl``:
the request's key, the offset and length of its line, and a digest of the line's exact
bytes, so a line edited in place, moved or replaced by one of the same length is never
taken for the answer (a ``reuse.keys`` of an older studio, without digests, is not read:
its answers are simply not reused). Records are appended after the lines they point at are
durable, each write whole records at once, so a crash can cut only the last record (it is
ignored) and never leaves a record pointing at a line that is not there. Only the worker
running the job writes its file; two jobs filling theirs at once never touch each other's.
Deleting a job deletes its file, and the answers with it.

An answer is reused only by whoever may read the job it came from: a job with the same
owner (:func:`reuse_owner`: the same API key, else the same signed-in or local user).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import struct
from collections.abc import Collection, Iterable, Mapping
from itertools import repeat
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from core.jobs.folder import JobFolder
from core.jobs.output_file import split_chain
from core.reuse.keys import KEY_BYTES

KEY_FILE = "reuse.v2.keys"  # "reuse.keys" (records without a digest) is never read
DIGEST_BYTES = 16  # BLAKE2b-128 of the line: an edit that keeps it has odds of 2**-128
# key, offset of the line, its length, its digest: fixed-size, so a reader may take the
# file as columns (numpy) as well as record by record.
_RECORD = struct.Struct(f"<{KEY_BYTES}sQI{DIGEST_BYTES}s")


def line_digest(raw: bytes) -> bytes:
    """The digest a record holds of its line's exact bytes (its newline included)."""
    return hashlib.blake2b(raw, digest_size=DIGEST_BYTES).digest()


def reuse_owner(provenance: Mapping[str, Any]) -> str | None:
    """Whose answers a job's are, from its ``job.json`` provenance: its API key's id
    (``key:<id>``), else the user who made it (``user:<name>``: signed in, or this
    machine's). None for a job made before keys had ids, whose owner's name cannot tell a
    key from a user: its answers are reused by no one."""
    if "owner_key" not in provenance:
        return None
    key, name = provenance.get("owner_key"), provenance.get("owner")
    if isinstance(key, str):
        return f"key:{key}"
    return f"user:{name}" if isinstance(name, str) else None


def local_owner(user: str | None = None) -> str:
    """The owner of a job made without a key by ``user`` (None: this machine's user, as
    :func:`core.jobs.folder.create_job` records it)."""
    return f"user:{user or getpass.getuser()}"


def _owner_of(folder: Path) -> str | None:
    try:
        provenance = json.loads((folder / "job.json").read_bytes()).get("provenance")
    except (OSError, ValueError, AttributeError):
        return None  # an unreadable job is no one's source
    return reuse_owner(provenance) if isinstance(provenance, dict) else None


class Earlier(NamedTuple):
    """An earlier answer: the job that wrote it, where its line lies in its output and
    the digest of its bytes (a tuple: a job's start makes one per answer it reuses, up to
    millions)."""

    job: JobFolder
    offset: int
    length: int
    digest: bytes


class KeyWriter:
    """Appends a job's records; call :meth:`add` once the lines are durable."""

    def __init__(self, job: JobFolder) -> None:
        self.path = job.path / KEY_FILE
        self._cut_partial_record()

    def _cut_partial_record(self) -> None:
        size = self.path.stat().st_size if self.path.exists() else 0
        if size % _RECORD.size:
            os.truncate(self.path, size - size % _RECORD.size)

    def add(self, answers: Iterable[tuple[bytes, int, bytes]]) -> None:
        """Indexes each answer ``(key, offset, the line's bytes)`` of durable lines."""
        data = b"".join(
            _RECORD.pack(key, offset, len(raw), line_digest(raw)) for key, offset, raw in answers
        )
        if data:
            with self.path.open("ab") as handle:
                handle.write(data)


def find_earlier(
    jobs_dir: Path, wanted: Collection[bytes], skip: str, owner: str | None
) -> dict[bytes, Earlier]:
    """The newest earlier answer of each ``wanted`` key, over every job but ``skip`` that
    ``owner`` (:func:`reuse_owner`) owns: the one place the worker and the forecast pick
    the jobs whose answers a job may take (None owns none)."""
    if not wanted or owner is None or not jobs_dir.is_dir():
        return {}
    jobs: list[JobFolder] = []
    newest: dict[bytes, tuple[int, tuple[bytes, int, int, bytes]]] = {}
    # Oldest first, so a newer job's answer replaces an older one's. Every record goes in
    # whole, one update per job, with no test per record in Python (a job's start may
    # look up a million).
    for folder in sorted(jobs_dir.iterdir(), key=lambda p: p.name):
        path = folder / KEY_FILE
        if folder.name == skip or not path.is_file() or _owner_of(folder) != owner:
            continue
        data = path.read_bytes()
        whole = memoryview(data)[: len(data) - len(data) % _RECORD.size]  # not a torn last one
        records = list(_RECORD.iter_unpack(whole))
        numbered = zip(repeat(len(jobs)), records, strict=False)  # repeat() never ends
        newest.update(zip([record[0] for record in records], numbered, strict=False))
        jobs.append(JobFolder(folder))
    found = {}
    for key in wanted:
        if (hit := newest.get(key)) is not None:
            number, (_, offset, length, digest) = hit
            found[key] = Earlier(jobs[number], offset, length, digest)
    return found


class EarlierLineError(ValueError):
    """An earlier job's output does not hold the answer its keys point at."""


class EarlierLines:
    """Reads the result lines :class:`Earlier` answers point at, each job's output opened
    once (a rerun may take a million lines from a few jobs)."""

    def __init__(self) -> None:
        self._handles: dict[Path, BinaryIO] = {}

    def __enter__(self) -> EarlierLines:
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles.values():
            handle.close()

    def read(self, earlier: Earlier) -> dict[str, Any]:
        """The result line ``earlier`` points at, checked to be the very bytes its record
        was written for, and a whole success line.

        Raises:
            EarlierLineError: the output is shorter than the record says (truncated), or
                the bytes there are not those of the line (edited, moved or replaced).
        """
        path = earlier.job.output
        try:
            handle = self._handles.get(path)
            if handle is None:
                handle = self._handles[path] = path.open("rb")
            handle.seek(earlier.offset)
            raw = handle.read(earlier.length)
        except OSError as exc:
            raise EarlierLineError(f"{path} cannot be read ({exc.strerror or exc})") from exc
        where = f"{path} at byte {earlier.offset:,}"
        if len(raw) < earlier.length or not raw.endswith(b"\n"):
            raise EarlierLineError(f"{where}: the file is truncated")
        if line_digest(raw) != earlier.digest:
            raise EarlierLineError(
                f"{where}: not the line its key was written for (edited, moved or replaced)"
            )
        content, chain = split_chain(raw.rstrip(b"\n"))
        try:
            line = json.loads(content)
        except ValueError:
            line = None
        line = line if isinstance(line, dict) else {}
        response = line.get("response")
        body = response.get("body") if isinstance(response, dict) else None
        if chain is None or not isinstance(body, dict) or line.get("error") is not None:
            raise EarlierLineError(f"{where}: not the result line its key was written for")
        return line
