"""Where each job's answers lie by key: a file beside its output, read at a job's start.

``reuse.keys`` holds one fixed-size record per answer the job wrote to ``output.jsonl``:
the request's key, and the offset and length of its line. Records are appended after the
lines they point at are durable, each write whole records at once, so a crash can cut only
the last record (it is ignored) and never leaves a record pointing at a line that is not
there. Only the worker running the job writes its file; two jobs filling theirs at once
never touch each other's. Deleting a job deletes its file, and the answers with it.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Collection, Iterable
from itertools import repeat
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from core.jobs.folder import JobFolder
from core.jobs.output_file import split_chain
from core.reuse.keys import KEY_BYTES

KEY_FILE = "reuse.keys"
_RECORD = struct.Struct(f"<{KEY_BYTES}sQI")  # key, offset of the line, its length


class Earlier(NamedTuple):
    """An earlier answer: the job that wrote it and where its line lies in its output (a
    tuple: a job's start makes one per answer it reuses, up to millions)."""

    job: JobFolder
    offset: int
    length: int


class KeyWriter:
    """Appends a job's records; call :meth:`add` once the lines are durable."""

    def __init__(self, job: JobFolder) -> None:
        self.path = job.path / KEY_FILE
        self._cut_partial_record()

    def _cut_partial_record(self) -> None:
        size = self.path.stat().st_size if self.path.exists() else 0
        if size % _RECORD.size:
            os.truncate(self.path, size - size % _RECORD.size)

    def add(self, records: Iterable[tuple[bytes, int, int]]) -> None:
        data = b"".join(_RECORD.pack(*record) for record in records)
        if data:
            with self.path.open("ab") as handle:
                handle.write(data)


def find_earlier(jobs_dir: Path, wanted: Collection[bytes], skip: str) -> dict[bytes, Earlier]:
    """The newest earlier answer of each ``wanted`` key, over every job but ``skip``."""
    if not wanted or not jobs_dir.is_dir():
        return {}
    jobs: list[JobFolder] = []
    newest: dict[bytes, tuple[int, tuple[bytes, int, int]]] = {}
    # Oldest first, so a newer job's answer replaces an older one's. Every record goes in
    # whole, one update per job, with no test per record in Python (a job's start may
    # look up a million).
    for folder in sorted(jobs_dir.iterdir(), key=lambda p: p.name):
        path = folder / KEY_FILE
        if folder.name == skip or not path.is_file():
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
            number, (_, offset, length) = hit
            found[key] = Earlier(jobs[number], offset, length)
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
        """The result line ``earlier`` points at, checked to be a whole success line.

        Raises:
            EarlierLineError: the output is shorter than the record says (truncated), or
                the bytes there are not a success line (edited or corrupt).
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
