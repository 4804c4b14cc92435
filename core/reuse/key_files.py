"""The layout of a job's key file (``reuse.v2.keys``, :mod:`core.reuse.index`) and which jobs
hold one: without numpy, so a forecast where no job holds an answer never loads it."""

from __future__ import annotations

import struct
from pathlib import Path

from core.reuse.keys import KEY_BYTES

KEY_FILE = "reuse.v2.keys"  # "reuse.keys" (records without a digest) is never read
DIGEST_BYTES = 16  # BLAKE2b-128 of the line: an edit that keeps it has odds of 2**-128
# key, offset of the line, its length, its digest: fixed-size, so a reader may take the
# file as columns (numpy) as well as record by record.
RECORD = struct.Struct(f"<{KEY_BYTES}sQI{DIGEST_BYTES}s")


def jobs_on_disk(jobs_dir: Path) -> dict[str, tuple[int, int]]:
    """Each job in ``jobs_dir`` that indexed an answer: its key file's inode and records."""
    found = {}
    for folder in jobs_dir.iterdir():
        try:
            stat = (folder / KEY_FILE).stat()
        except OSError:
            continue
        if stat.st_size >= RECORD.size:
            found[folder.name] = (stat.st_ino, stat.st_size // RECORD.size)
    return found
