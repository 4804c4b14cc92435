"""A private copy of the index for a process that finds the database held by the app.

DuckDB lets one process open a database file, and then no other may even read it. The
command line does not wait for the app: it copies the file (and its write-ahead log) into
a temporary folder and opens the copy, then brings it up to date from the truth (the job
folders and the human-work files) as every store is brought up to date. A copy taken in
the middle of a write may not open; it is then set aside like any unreadable database and
the private index is built from the files alone, slower but the same rows. Copying is
measured to be far cheaper than rebuilding (see docs/data.md).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from core.store.db import Store


def snapshot_store(database: Path, human_dir: Path) -> Store:
    """A store on a private copy of ``database``, removed when it is closed."""
    folder = Path(tempfile.mkdtemp(prefix="batch-studio-snapshot-"))
    try:
        copy = folder / database.name
        for suffix in ("", ".wal"):
            source = database.with_name(database.name + suffix)
            if source.exists():
                shutil.copyfile(source, copy.with_name(copy.name + suffix))
        store = Store(copy, human_dir=human_dir)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    store.temporary = folder
    return store
