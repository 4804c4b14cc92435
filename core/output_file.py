"""Appending result lines to ``output.jsonl`` without ever losing one.

Lines are written in chunks, each flushed and fsynced before the status says they exist.
A crash mid-write can leave a torn last line; it is cut off before the file is reopened,
so the request it belonged to simply runs again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


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


def read_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The complete result lines of an output file (a torn last line is skipped)."""
    if not path.exists():
        return
    with path.open("rb") as handle:
        for raw in handle:
            if raw.endswith(b"\n") and raw.strip():
                yield json.loads(raw)


def finished_custom_ids(path: Path) -> set[str]:
    """The ``custom_id`` of every complete line already written."""
    return {line["custom_id"] for line in read_lines(path)}


class OutputWriter:
    """Appends result lines; each :meth:`write` is durable when it returns."""

    def __init__(self, path: Path) -> None:
        repair_torn_tail(path)
        self._handle = path.open("ab")

    def write(self, lines: Iterable[dict[str, Any]]) -> None:
        data = b"".join(
            json.dumps(line, ensure_ascii=False).encode("utf-8") + b"\n" for line in lines
        )
        if not data:
            return
        self._handle.write(data)
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> OutputWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
