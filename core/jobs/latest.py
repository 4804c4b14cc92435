"""The last result lines of a job, for Monitor's "Latest results" (only the files' tails
are read)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.jobs.folder import JobFolder
from core.jobs.ledger import LedgerReader, _readers
from core.jobs.output_file import checked_line


def recent_lines(path: Path, count: int = 5, tail_bytes: int = 262_144) -> list[dict[str, Any]]:
    """The last ``count`` complete lines of a result file, newest last (reads only its tail).

    Raises:
        CorruptLine: one of them is not a JSON object (its file and line named).
    """
    if not path.exists():
        return []
    size = path.stat().st_size
    first = max(0, size - tail_bytes)
    with path.open("rb") as handle:
        handle.seek(first)
        data = handle.read()
    spans, start = [], first
    for index, raw in enumerate(data.split(b"\n")[:-1]):
        if raw.strip() and not (index == 0 and first > 0):  # a tail's first piece may be cut
            spans.append((start, raw))
        start += len(raw) + 1
    return [json.loads(checked_line(path, s, raw)) for s, raw in spans[-count:]]


def standing_failures(job: JobFolder, count: int = 3) -> list[dict[str, Any]]:
    """The last ``count`` failure lines whose request has no success since: a retry's
    successes supersede the failures it ran again, which stay in ``errors.jsonl``."""
    reader = _readers.get_or_make(job.path, lambda: LedgerReader(job))
    with reader.lock:
        succeeded = reader.read().succeeded
        lines = recent_lines(job.errors, count + 200)
        return [line for line in lines if line.get("custom_id") not in succeeded][-count:]
