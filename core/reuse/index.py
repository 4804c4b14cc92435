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
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from core.jobs.folder import JobFolder
from core.jobs.output_file import split_chain
from core.reuse.keys import KEY_BYTES

KEY_FILE = "reuse.v2.keys"  # "reuse.keys" (records without a digest) is never read
DIGEST_BYTES = 16  # BLAKE2b-128 of the line: an edit that keeps it has odds of 2**-128
# key, offset of the line, its length, its digest: fixed-size, so a reader may take the
# file as columns (numpy) as well as record by record.
_RECORD = struct.Struct(f"<{KEY_BYTES}sQI{DIGEST_BYTES}s")
# The same record as numpy columns. The key (KEY_BYTES = 16) is read as two 8-byte
# integers, never as bytes: "S16" would drop a key's trailing zero bytes, and sorts slower.
_KEY = np.dtype([("high", "<u8"), ("low", "<u8")])
_COLUMNS = np.dtype(
    {
        "names": ["high", "low", "offset", "length", "digest"],
        "formats": ["<u8", "<u8", "<u8", "<u4", f"V{DIGEST_BYTES}"],
        "offsets": [0, 8, 16, 24, 28],
        "itemsize": _RECORD.size,
    }
)


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


class EarlierAnswers:
    """The newest earlier answer of each key asked, by the key's place in what was asked
    (a job's start may ask a million: no Python object per key until one is read)."""

    def __init__(self, jobs: list[JobFolder], starts: list[int], records: Any, rows: Any) -> None:
        self._jobs = jobs
        self._starts = starts  # the first row of each job's records, in ``records``
        self._records = records  # every job's records, oldest job first (``_COLUMNS``)
        self._rows = rows  # the row of each key asked, -1 where no job answered it

    def get(self, place: int) -> Earlier | None:
        """The answer of the key asked at ``place``; None where no earlier job has one."""
        row = int(self._rows[place])
        return self._at(row) if row >= 0 else None

    def items(self) -> Iterator[tuple[int, Earlier]]:
        """The place of each key asked that an earlier job answered, and its answer."""
        for place in np.flatnonzero(self._rows >= 0).tolist():
            yield place, self._at(int(self._rows[place]))

    def _at(self, row: int) -> Earlier:
        record = self._records[row]
        job = self._jobs[bisect_right(self._starts, row) - 1]
        return Earlier(
            job, int(record["offset"]), int(record["length"]), record["digest"].tobytes()
        )

    @property
    def found(self) -> int:
        """How many of the keys asked have an earlier answer."""
        return int((self._rows >= 0).sum())


def find_earlier(
    jobs_dir: Path, wanted: Sequence[bytes] | np.ndarray, skip: str, owner: str | None
) -> EarlierAnswers:
    """The newest earlier answer of each ``wanted`` key, over every job but ``skip`` that
    ``owner`` (:func:`reuse_owner`) owns: the one place the worker and the forecast pick
    the jobs whose answers a job may take (None owns none).

    Every job's records are read straight into columns and matched with the keys asked in
    one sort (numpy), with no step per record or per key in Python: a job's start may look
    up a million keys among ten million answers. ``wanted``: keys, or an array of 16-byte
    items (a forecast's, :func:`core.reuse.keys.keys_of`).
    """
    searched = len(wanted) > 0 and owner is not None and jobs_dir.is_dir()
    jobs, starts, records = _read_records(jobs_dir, skip, owner) if searched else ([], [], None)
    joined = wanted.tobytes() if isinstance(wanted, np.ndarray) else b"".join(wanted)
    asked = np.frombuffer(joined, _KEY)
    if len(asked) != len(wanted):
        raise ValueError(f"a key is {KEY_BYTES} bytes")
    if records is None or not len(records):
        return EarlierAnswers([], [], records, np.full(len(asked), -1))
    return EarlierAnswers(jobs, starts, records, _match(records, asked))


def _read_records(
    jobs_dir: Path, skip: str, owner: str | None
) -> tuple[list[JobFolder], list[int], Any]:
    """The records of every job but ``skip`` that ``owner`` owns, oldest job first, read
    into one array (44 bytes a record: no copy of it is made), with each job's first row."""
    indexed: list[tuple[JobFolder, Path, int]] = []
    for folder in sorted(jobs_dir.iterdir(), key=lambda p: p.name):  # oldest first
        path = folder / KEY_FILE
        try:
            count = path.stat().st_size // _RECORD.size  # a torn last record is left out
        except OSError:
            continue  # a job that indexed no answer
        if folder.name != skip and _owner_of(folder) == owner:
            indexed.append((JobFolder(folder), path, count))
    records = np.empty(sum(count for *_, count in indexed), _COLUMNS)
    buffer = memoryview(records.view(np.uint8))
    jobs: list[JobFolder] = []
    starts: list[int] = []
    filled = 0
    for job, path, count in indexed:
        try:
            with path.open("rb") as handle:  # a file cut since its size was read: what is left
                got = handle.readinto(buffer[filled * _RECORD.size :][: count * _RECORD.size])
        except OSError:
            continue
        if got >= _RECORD.size:
            jobs.append(job)
            starts.append(filled)
            filled += got // _RECORD.size
    return jobs, starts, records[:filled]


def _match(records: Any, asked: Any) -> Any:
    """The row in ``records`` of the newest record of each key ``asked`` (-1: none): both
    sorted together by key, so each key asked lies in the run of its own key's records."""
    known = len(records)
    high = np.concatenate([records["high"], asked["high"]])
    low = np.concatenate([records["low"], asked["low"]])
    order = np.argsort(high)  # numpy's SIMD sort: twice as fast as a sort on both halves
    high, low = high[order], low[order]
    if ((high[1:] == high[:-1]) & (low[1:] != low[:-1])).any():
        # Two keys share their first 8 bytes (odds of 1e-7 among a million keys, or made
        # on purpose): sort on all 16, so that each key's run holds only that key.
        again = np.lexsort((low, high))
        order, high, low = order[again], high[again], low[again]
    first = np.empty(len(order), dtype=bool)
    first[0] = True
    first[1:] = (high[1:] != high[:-1]) | (low[1:] != low[:-1])
    del high, low
    # Records are read oldest first: the newest of a run is its highest row; a key asked
    # stands for no record (-1).
    runs = np.flatnonzero(first)
    newest = np.maximum.reduceat(np.where(order < known, order, -1), runs)
    run_of = np.cumsum(first) - 1
    is_asked = order >= known
    rows = np.empty(len(asked), dtype=np.int64)
    rows[order[is_asked] - known] = newest[run_of[is_asked]]
    return rows


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
