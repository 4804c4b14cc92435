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

import fcntl
import hashlib
import json
import mmap
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np
from pydantic import BaseModel

from core.files import write_atomic

# Owners are named where job.json records them; re-exported for the worker and the forecast.
from core.jobs.folder import JobFolder
from core.jobs.folder import job_owner as reuse_owner
from core.jobs.folder import local_owner as local_owner
from core.jobs.output_file import split_chain

# The key file's layout lives apart, without numpy (a forecast with no answer made needs it).
from core.reuse.key_files import DIGEST_BYTES, KEY_FILE, jobs_on_disk
from core.reuse.key_files import RECORD as _RECORD
from core.reuse.keys import KEY_BYTES

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

    def __init__(self, jobs: list[JobFolder], found: Any) -> None:
        self._jobs = jobs
        self._found = found  # per key asked: its job (a place in ``jobs``, -1: none), record

    def get(self, place: int) -> Earlier | None:
        """The answer of the key asked at ``place``; None where no earlier job has one."""
        return self._at(place) if self._found["job"][place] >= 0 else None

    def items(self) -> Iterator[tuple[int, Earlier]]:
        """The place of each key asked that an earlier job answered, and its answer."""
        for place in np.flatnonzero(self._found["job"] >= 0).tolist():
            yield place, self._at(place)

    def _at(self, place: int) -> Earlier:
        found = self._found[place]
        return Earlier(
            self._jobs[int(found["job"])],
            int(found["offset"]),
            int(found["length"]),
            found["digest"].tobytes(),
        )

    @property
    def found(self) -> int:
        """How many of the keys asked have an earlier answer."""
        return int((self._found["job"] >= 0).sum())


_FOUND = np.dtype(
    [("job", "<i4"), ("offset", "<u8"), ("length", "<u4"), ("digest", f"V{DIGEST_BYTES}")]
)


def find_earlier(
    jobs_dir: Path,
    wanted: Sequence[bytes] | np.ndarray,
    skip: str,
    owner: str | None,
    *,
    indexed: bool = True,
) -> EarlierAnswers:
    """The newest earlier answer of each ``wanted`` key, over every job but ``skip`` that
    ``owner`` (:func:`reuse_owner`) owns: the one place the worker and the forecast pick
    the jobs whose answers a job may take (None owns none).

    The keys are searched in the sorted index beside the jobs (:func:`update_index`),
    memory-mapped, so a lookup reads the pages its keys lie on, never every answer made;
    what the index does not hold yet (a running job's last records, a job indexed since)
    is read from those jobs' own files, and the index is brought up to date first when
    that is much (or it is missing or damaged). ``indexed=False`` reads every job's file
    instead (what the index is checked against). The record taken is always read back
    from its job's own file and its key compared, so the index only says where to look:
    a deleted job's answers are never taken, nor a record its file no longer holds.
    ``wanted``: keys, or an array of 16-byte items (a forecast's,
    :func:`core.reuse.keys.keys_of`).
    """
    joined = wanted.tobytes() if isinstance(wanted, np.ndarray) else b"".join(wanted)
    asked = np.frombuffer(joined, _KEY)
    if len(asked) != len(wanted):
        raise ValueError(f"a key is {KEY_BYTES} bytes")
    found = np.zeros(len(asked), _FOUND)
    found["job"] = -1
    if not len(asked) or owner is None or not jobs_dir.is_dir():
        return EarlierAnswers([], found)
    disk = jobs_on_disk(jobs_dir)
    index = open_index(jobs_dir, disk) if indexed else None
    if indexed and (index is None or index.unindexed > CATCH_UP_RECORDS):
        try:
            update_index(jobs_dir)
            disk = jobs_on_disk(jobs_dir)
            index = open_index(jobs_dir, disk)
        except OSError:
            pass  # a data folder this process may not write: its files are read instead
    names = sorted(
        name
        for name, (_inode, _count, job_owner) in _owners(jobs_dir, disk, index).items()
        if name != skip and job_owner == owner
    )
    if not names:  # nothing to take: no sort of the keys (a forecast asks a file's worth)
        return EarlierAnswers([], found)
    order = np.argsort(asked["high"], kind="stable")  # asked in key order: pages in order
    sorted_asked = asked[order]
    candidates = _candidates(jobs_dir, names, disk, index, sorted_asked)
    _read_back(jobs_dir, names, disk, sorted_asked, candidates, found, order)
    return EarlierAnswers([JobFolder(jobs_dir / name) for name in names], found)


def _owners(jobs_dir: Path, disk: Mapping[str, tuple[int, int]], index: Any) -> dict:
    """Each job on disk with its inode, record count and owner (the index's where it holds
    the job, else its ``job.json``)."""
    known = index.owners if index is not None else {}
    return {
        name: (inode, count, known[name] if name in known else _owner_of(jobs_dir / name))
        for name, (inode, count) in disk.items()
    }


def _read_back(
    jobs_dir: Path,
    names: list[str],
    disk: Mapping[str, tuple[int, int]],
    sorted_asked: Any,
    candidates: tuple[Any, Any, Any],
    found: Any,
    order: Any,
) -> None:
    """Fills ``found`` with the newest candidate of each key asked (the newest job, then
    its latest record), read from its job's own file and kept only where the key there is
    the key asked."""
    asked_at, job, pos = candidates
    if not len(asked_at):
        return
    newest = np.lexsort((pos, job, asked_at))
    asked_at, job, pos = asked_at[newest], job[newest], pos[newest]
    last = np.ones(len(asked_at), dtype=bool)
    last[:-1] = asked_at[1:] != asked_at[:-1]
    asked_at, job, pos = asked_at[last], job[last], pos[last]
    for ref in np.unique(job).tolist():
        mine = np.flatnonzero(job == ref)
        records, inside = _records_at(jobs_dir / names[ref] / KEY_FILE, pos[mine])
        keys = sorted_asked[asked_at[mine]]
        same = inside & (records["high"] == keys["high"]) & (records["low"] == keys["low"])
        places = order[asked_at[mine][same]]
        found["job"][places] = ref
        found["offset"][places] = records["offset"][same]
        found["length"][places] = records["length"][same]
        found["digest"][places] = records["digest"][same]


def _records_at(path: Path, rows: Any) -> tuple[Any, Any]:
    """The records at ``rows`` of a job's key file, and which of them it holds (none where
    it is gone: a job deleted since)."""
    records = np.zeros(len(rows), _COLUMNS)
    inside = np.zeros(len(rows), dtype=bool)
    try:
        with path.open("rb") as handle:
            count = os.fstat(handle.fileno()).st_size // _RECORD.size
            if count:
                columns = np.memmap(handle, _COLUMNS, "r", shape=(count,))
                inside = rows < count
                records[inside] = columns[rows[inside]]
    except OSError:
        pass
    return records, inside


def read_columns(path: Path, start: int, count: int) -> Any:
    """Records ``start`` to ``start + count`` of a job's key file as columns (fewer where
    the file is shorter now; None where it cannot be read)."""
    records = np.empty(count, _COLUMNS)
    try:
        with path.open("rb") as handle:
            handle.seek(start * _RECORD.size)
            got = handle.readinto(memoryview(records.view(np.uint8)))
    except OSError:
        return None
    return records[: got // _RECORD.size]


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


# -- the sorted index beside the jobs ------------------------------------------------------
#
# ``<data folder>/reuse-index/jobs/`` holds segments, each the records of some jobs sorted
# by key in four columns (the key's halves, the job's number, the record's place in its
# job's file: 24 bytes a record, memory-mapped by a lookup), and ``manifest.json``, which
# names the segments and, for each job, its number, owner, key file (by inode) and how many
# of its records are indexed. Key files only grow, so the first ``records`` of a job that
# kept its inode are still the ones indexed; its later records are read from its file.
# Writers (the worker when a job ends, a lookup that finds much unindexed) take ``lock``;
# readers take nothing: segments are written whole under new names, the manifest replaced
# by a rename, and a segment merged away is deleted only once no manifest names it (a
# reader that lost the race reads the manifest again).

INDEX_FOLDER = "reuse-index"
MANIFEST = "manifest.json"
LOCK = "lock"
SEGMENT_RECORDS = 2_000_000  # the most a segment written or merged holds (~48 MB): a
# writer's memory is bounded by it, however many answers the jobs hold
SMALL_SEGMENTS = 4  # more segments under half that size are merged
CATCH_UP_RECORDS = 100_000  # unindexed records a lookup reads itself before indexing them
_SEGMENT_BYTES = 24


class IndexedJob(BaseModel):
    """A job whose records the index holds."""

    number: int  # in the segments' job column: a job made again under its id gets another
    owner: str | None  # :func:`reuse_owner` of its job.json when it was indexed
    inode: int  # of its key file: another file under the same name is another job
    records: int  # its first records that the segments hold


class IndexManifest(BaseModel):
    """What the index holds: ``manifest.json``."""

    next_number: int = 0
    jobs: dict[str, IndexedJob] = {}
    segments: dict[str, int] = {}  # file name -> records


class _Index(NamedTuple):
    """An index opened for a lookup: its segments (memory-mapped columns) and, for each job
    on disk it still holds as it was, the job's number, owner and indexed records."""

    segments: list[tuple[Any, Any, Any, Any]]  # high, low, job number, place in the job
    numbers: dict[str, int]
    owners: dict[str, str | None]
    records: dict[str, int]
    unindexed: int  # records on disk the segments do not hold


def index_folder(jobs_dir: Path) -> Path:
    """The index of the jobs in ``jobs_dir``, beside it in the data folder."""
    return jobs_dir.parent / INDEX_FOLDER / jobs_dir.name


def _open_segment(path: Path, count: int) -> tuple[Any, Any, Any, Any]:
    """A segment's columns, memory-mapped (ValueError: not the size its manifest says)."""
    with path.open("rb") as handle:
        if os.fstat(handle.fileno()).st_size != count * _SEGMENT_BYTES:
            raise ValueError(f"{path} is damaged")
        if not count:
            data = np.zeros(0, np.uint8)
        else:
            data = np.frombuffer(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)
    n = count
    return (
        data[: 8 * n].view("<u8"),
        data[8 * n : 16 * n].view("<u8"),
        data[16 * n : 20 * n].view("<u4"),
        data[20 * n : 24 * n].view("<u4"),
    )


def _read_manifest(folder: Path) -> tuple[IndexManifest, list[tuple[Any, Any, Any, Any]]]:
    """The manifest and its segments; FileNotFoundError where there is no index, ValueError
    where it is damaged."""
    manifest = IndexManifest.model_validate_json((folder / MANIFEST).read_bytes())
    segments = [_open_segment(folder / name, n) for name, n in manifest.segments.items()]
    return manifest, segments


def open_index(jobs_dir: Path, disk: Mapping[str, tuple[int, int]]) -> _Index | None:
    """The index of ``jobs_dir`` as it stands against ``disk`` (:func:`jobs_on_disk`);
    None where it is missing or damaged."""
    folder = index_folder(jobs_dir)
    for _ in range(5):
        try:
            manifest, segments = _read_manifest(folder)
            break
        except FileNotFoundError:
            if not (folder / MANIFEST).exists():
                return None
            continue  # a segment merged away after the manifest was read: read it again
        except (OSError, ValueError):
            return None
    else:
        return None
    numbers, owners, records, unindexed = {}, {}, {}, 0
    for name, (inode, count) in disk.items():
        job = manifest.jobs.get(name)
        if job is not None and job.inode == inode and job.records <= count:
            numbers[name], owners[name], records[name] = job.number, job.owner, job.records
            unindexed += count - job.records
        else:
            unindexed += count
    return _Index(segments, numbers, owners, records, unindexed)


def _pairs(sorted_high: Any, probe_high: Any) -> tuple[Any, Any]:
    """Each pair (probe, row) where ``probe_high[probe] == sorted_high[row]``."""
    start = np.searchsorted(sorted_high, probe_high, "left")
    counts = np.searchsorted(sorted_high, probe_high, "right") - start
    probe = np.repeat(np.arange(len(probe_high)), counts)
    rows = np.repeat(start - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    return probe, rows


def _candidates(
    jobs_dir: Path,
    names: list[str],
    disk: Mapping[str, tuple[int, int]],
    index: _Index | None,
    sorted_asked: Any,
) -> tuple[Any, Any, Any]:
    """Every record of the jobs ``names`` under a key asked: the key's place in
    ``sorted_asked``, the job's place in ``names``, the record's place in its file. The
    segments give those they hold; the rest is read from the jobs' files."""
    found: list[tuple[Any, Any, Any]] = []
    if index is not None and index.segments:
        numbers = [index.numbers.get(name, -1) for name in names]
        ref_of = np.full(max([*numbers, 0]) + 1, -1, np.int64)
        limit = np.zeros(len(ref_of), np.int64)
        for ref, (name, number) in enumerate(zip(names, numbers, strict=True)):
            if number >= 0:
                ref_of[number], limit[number] = ref, index.records[name]
        for high, low, job, pos in index.segments:
            asked_at, rows = _pairs(high, sorted_asked["high"])
            job_at, pos_at = job[rows].astype(np.int64), pos[rows].astype(np.int64)
            known = job_at < len(ref_of)
            job_at = np.where(known, job_at, 0)
            keep = known & (low[rows] == sorted_asked["low"][asked_at])
            keep &= (ref_of[job_at] >= 0) & (pos_at < limit[job_at])
            found.append((asked_at[keep], ref_of[job_at[keep]], pos_at[keep]))
    unread = [
        (ref, name, index.records.get(name, 0) if index is not None else 0)
        for ref, name in enumerate(names)
    ]
    parts = []
    for ref, name, start in unread:
        if disk[name][1] > start:
            records = read_columns(jobs_dir / name / KEY_FILE, start, disk[name][1] - start)
            if records is not None and len(records):
                place = np.arange(start, start + len(records), dtype=np.int64)
                parts.append((records, np.full(len(records), ref, np.int64), place))
    if parts:
        records = np.concatenate([part[0] for part in parts])
        refs = np.concatenate([part[1] for part in parts])
        places = np.concatenate([part[2] for part in parts])
        rows, asked_at = _pairs(sorted_asked["high"], records["high"])
        keep = records["low"][rows] == sorted_asked["low"][asked_at]
        found.append((asked_at[keep], refs[rows[keep]], places[rows[keep]]))
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return tuple(np.concatenate([part[i] for part in found]) for i in range(3))  # type: ignore[return-value]


def update_index(jobs_dir: Path) -> None:
    """Brings the index of ``jobs_dir`` up to date with the jobs' key files: indexes the
    records it does not hold, forgets deleted jobs, merges small segments, and rebuilds it
    from the key files where it is missing, damaged or mostly deleted jobs' records.

    Raises:
        OSError: the index folder cannot be written.
    """
    folder = index_folder(jobs_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / LOCK).open("a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one writer at a time; readers take no lock
        try:
            manifest = _read_manifest(folder)[0]
        except (OSError, ValueError):
            manifest = IndexManifest()  # missing or damaged: rebuilt from the key files
        _catch_up(folder, manifest, jobs_dir)
        live = sum(job.records for job in manifest.jobs.values())
        if sum(manifest.segments.values()) > 2 * live + SEGMENT_RECORDS:
            manifest = IndexManifest()  # mostly deleted jobs' records: rebuilt without them
            _catch_up(folder, manifest, jobs_dir)
        write_atomic(folder / MANIFEST, manifest.model_dump_json())
        for path in folder.iterdir():  # segments no manifest names any more, torn writes
            if path.name not in manifest.segments and path.name not in (MANIFEST, LOCK):
                path.unlink(missing_ok=True)


def _catch_up(folder: Path, manifest: IndexManifest, jobs_dir: Path) -> None:
    """Adds to ``manifest`` (and new segments) the records of ``jobs_dir`` it lacks."""
    disk = jobs_on_disk(jobs_dir)
    for name, job in list(manifest.jobs.items()):
        here = disk.get(name)
        if here is None or here[0] != job.inode or here[1] < job.records:
            del manifest.jobs[name]  # deleted or made again: its records are never used
    batch: list[tuple[Any, Any, Any, Any]] = []
    batched = 0
    for name in sorted(disk):
        inode, count = disk[name]
        job = manifest.jobs.get(name)
        if job is None:
            owner = _owner_of(jobs_dir / name)
            job = IndexedJob(number=manifest.next_number, owner=owner, inode=inode, records=0)
            manifest.next_number += 1
            manifest.jobs[name] = job
        while job.records < count:
            want = min(count - job.records, SEGMENT_RECORDS - batched)
            records = read_columns(jobs_dir / name / KEY_FILE, job.records, want)
            if records is None or not len(records):
                break
            n = len(records)
            number = np.full(n, job.number, np.uint32)
            place = np.arange(job.records, job.records + n, dtype=np.uint32)
            batch.append((records["high"], records["low"], number, place))
            job.records, batched = job.records + n, batched + n
            if batched >= SEGMENT_RECORDS:
                _write_segment(folder, manifest, batch)
                batch, batched = [], 0
    if batch:
        _write_segment(folder, manifest, batch)
    _merge_small(folder, manifest)


def _merge_small(folder: Path, manifest: IndexManifest) -> None:
    """Merges the smallest segments while more than :data:`SMALL_SEGMENTS` are small,
    leaving out the records of jobs the manifest no longer holds."""
    limit = np.zeros(manifest.next_number, np.int64)
    for job in manifest.jobs.values():
        limit[job.number] = job.records
    while True:
        small = sorted(
            (n, name) for name, n in manifest.segments.items() if n < SEGMENT_RECORDS // 2
        )
        if len(small) <= SMALL_SEGMENTS:
            return
        taken, total = [], 0
        for n, name in small:
            if taken and total + n > SEGMENT_RECORDS:
                break
            taken.append(name)
            total += n
        batch = []
        for name in taken:
            high, low, job, pos = _open_segment(folder / name, manifest.segments.pop(name))
            live = pos < limit[np.minimum(job, len(limit) - 1)] if len(limit) else pos < 0
            batch.append((high[live], low[live], job[live], pos[live]))
        _write_segment(folder, manifest, batch)


def _write_segment(
    folder: Path, manifest: IndexManifest, batch: list[tuple[Any, Any, Any, Any]]
) -> None:
    """Writes ``batch``'s records sorted by key as a new segment named in ``manifest``."""
    columns = [np.concatenate([part[i] for part in batch]) for i in range(4)]
    order = np.argsort(columns[0], kind="stable")  # by the key's first half: see _pairs
    dtypes = ("<u8", "<u8", "<u4", "<u4")
    name = f"{uuid.uuid4().hex}.seg"
    columns = [c[order].astype(t) for c, t in zip(columns, dtypes, strict=True)]
    write_atomic(folder / name, b"".join(c.tobytes() for c in columns))
    manifest.segments[name] = len(order)
