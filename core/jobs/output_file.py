"""Appending result lines to a job's result files without ever losing one.

Lines are written in chunks, each flushed and fsynced before the status says they exist.
A crash mid-write can leave a torn last line; it is cut off before the file is reopened,
so the request it belonged to simply runs again.

Each line carries a hash chain: ``chain_sha256`` is the SHA-256 of the previous line's
chain followed by this line's own bytes (the line as written, without the chain field), so
editing, removing or reordering any line breaks every chain after it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from core.files import lines_before

CHAIN_FIELD = "chain_sha256"
# Every line ends with this field: `, "chain_sha256": "<64 hex digits>"}`.
_CHAIN_PREFIX = b', "' + CHAIN_FIELD.encode() + b'": "'
_CHAIN_SUFFIX_LEN = len(_CHAIN_PREFIX) + 64 + 2


def chain_hash(previous: str, content: bytes) -> str:
    return hashlib.sha256(previous.encode() + content).hexdigest()


def split_chain(raw: bytes) -> tuple[bytes, str | None]:
    """A written line (without its newline) as ``(content, chain)``; chain None if absent."""
    if len(raw) >= _CHAIN_SUFFIX_LEN and raw[-_CHAIN_SUFFIX_LEN:].startswith(_CHAIN_PREFIX):
        return raw[:-_CHAIN_SUFFIX_LEN] + b"}", raw[-66:-2].decode()
    return raw, None


def _last_chain(path: Path) -> str:
    """The chain of a file's last complete line ("" for an empty file)."""
    if not path.exists() or path.stat().st_size == 0:
        return ""
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - _CHAIN_SUFFIX_LEN - 1))
        tail = handle.read().rstrip(b"\n")
    return split_chain(tail)[1] or ""


def repair_torn_tail(path: Path) -> int:
    """Cuts a last line that has no newline; returns how many bytes were dropped."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return 0
        # Walk back to the last newline in blocks.
        end = size
        while end > 0:
            start = max(0, end - 65536)
            handle.seek(start)
            block = handle.read(end - start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            end = start
        else:
            keep = 0
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    return size - keep


READ_BYTES = 32 * 2**20  # what a reader holds of a file at once


class CorruptLine(ValueError):
    """A complete line of a results file that is not a JSON object: the file was damaged
    after it was written (NUL bytes from a crashed disk, a line edited by hand). Every
    reader of result lines meets it here, so none drops the line without a word; the
    message names the file and its line."""

    def __init__(self, path: Path, line_no: int, why: str) -> None:
        super().__init__(
            f"{path} line {line_no} is not a JSON object ({why}): the file was damaged "
            "after it was written"
        )
        self.path, self.line_no = path, line_no


class _Object(msgspec.Struct):
    """Any JSON object: decoding into it checks the syntax and skips every field."""


_decode_object = msgspec.json.Decoder(_Object).decode


def complete_spans(
    path: Path, offset: int, max_bytes: int = READ_BYTES
) -> tuple[list[tuple[int, bytes]], int]:
    """``(start, line)`` of the complete, non-blank lines in about ``max_bytes`` after byte
    ``offset`` (a torn last line is left for the next read; ``line`` without its newline)
    and the offset after them: how readers follow a file being appended, a bounded piece at
    a time (call again until no line comes).

    Raises:
        CorruptLine: a complete line that is not a JSON object (not UTF-8 included).
    """
    if not path.exists():
        return [], offset
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read(max_bytes)
        if len(data) == max_bytes and not data.endswith(b"\n"):
            data += handle.readline()  # the line the piece ends in, whole
    complete = data[: data.rfind(b"\n") + 1]
    found, start = [], offset
    for raw in complete.split(b"\n")[:-1]:
        if raw.strip():
            found.append((start, checked_line(path, start, raw)))
        start += len(raw) + 1
    return found, offset + len(complete)


def checked_line(path: Path, start: int, raw: bytes) -> bytes:
    """``raw``, the complete line at byte ``start`` of ``path``, once it is a JSON object.

    Raises:
        CorruptLine: it is not (not UTF-8 included), naming its file and line.
    """
    try:
        if not raw.isascii():
            raw.decode("utf-8")
        _decode_object(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise CorruptLine(path, lines_before(path, start) + 1, str(exc)) from None
    return raw


def complete_lines(path: Path, offset: int, max_bytes: int = READ_BYTES) -> tuple[list[bytes], int]:
    """:func:`complete_spans` without the starts: the lines and the offset after them.

    Raises:
        CorruptLine: a complete line that is not a JSON object (its file and line named).
    """
    spans, after = complete_spans(path, offset, max_bytes)
    return [raw for _, raw in spans], after


def read_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The complete result lines of an output file (a torn last line is skipped).

    Raises:
        CorruptLine: a complete line that is not a JSON object.
    """
    offset = 0
    while True:
        raws, after = complete_lines(path, offset)
        if after == offset:
            return
        yield from (json.loads(raw) for raw in raws)
        offset = after


def finished_custom_ids(path: Path) -> set[str]:
    """The ``custom_id`` of every complete line already written."""
    return {line["custom_id"] for line in read_lines(path)}


class OutputWriter:
    """Appends chained result lines; each :meth:`write` is durable when it returns."""

    def __init__(self, path: Path) -> None:
        repair_torn_tail(path)
        self._chain = _last_chain(path)
        self._handle = path.open("ab", buffering=0)  # no buffer to flush again on close

    def write(self, lines: Iterable[dict[str, Any]]) -> list[tuple[int, bytes]]:
        """Appends the lines and fsyncs them; returns where each starts and its bytes as
        written (what an index of answers records: :mod:`core.reuse.index`).
        On an error (a full disk) the file is cut back to where it was, so it never ends
        in a torn line, and the error is raised."""
        chain, parts = self._chain, []
        for line in lines:
            content = json.dumps(line, ensure_ascii=False).encode("utf-8")
            chain = chain_hash(chain, content)
            parts.append(content[:-1] + _CHAIN_PREFIX + chain.encode() + b'"}\n')
        if not parts:
            return []
        fd, data = self._handle.fileno(), memoryview(b"".join(parts))
        start = os.fstat(fd).st_size
        try:
            while data:  # a write may take only part of it
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, start)  # frees what it took: always possible
            raise
        self._chain = chain
        written = []
        for part in parts:
            written.append((start, part))
            start += len(part)
        return written

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> OutputWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
