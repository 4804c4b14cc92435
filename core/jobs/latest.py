"""The last result lines of a job, for Monitor's "Latest results" (only the files' tails
are read)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.jobs.folder import JobFolder
from core.jobs.ledger import LedgerReader, _readers


def recent_lines(path: Path, count: int = 5, tail_bytes: int = 262_144) -> list[dict[str, Any]]:
    """The last ``count`` complete lines of a result file, newest last (reads only its tail)."""
    if not path.exists():
        return []
    size = path.stat().st_size
    with path.open("rb") as handle:
        handle.seek(max(0, size - tail_bytes))
        data = handle.read()
    raws = [r for r in data.split(b"\n")[1 if size > tail_bytes else 0 : -1] if r.strip()]
    return [json.loads(r) for r in raws[-count:]]


def standing_failures(job: JobFolder, count: int = 3) -> list[dict[str, Any]]:
    """The last ``count`` failure lines whose request has no success since: a retry's
    successes supersede the failures it ran again, which stay in ``errors.jsonl``."""
    reader = _readers.get_or_make(job.path, lambda: LedgerReader(job))
    with reader.lock:
        succeeded = reader.read().succeeded
        lines = recent_lines(job.errors, count + 200)
        return [line for line in lines if line.get("custom_id") not in succeeded][-count:]
