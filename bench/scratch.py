"""A bench's scratch folder, removed when the bench ends: a run writes gigabytes (job
folders, DuckDB files), and repeated runs once filled a 250 GB disk."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch_folder(prefix: str) -> Path:
    """A new temporary folder, removed when this process exits (after an error too)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder
