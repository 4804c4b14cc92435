"""What the tests split from tests/unit/test_submit.py by kind share (docs/tests.md)."""

from __future__ import annotations

from pathlib import Path

from tests.support.jobs import request_line

REPEATING = [request_line("a", "one"), request_line("b", "two"), request_line("a", "three")]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path
