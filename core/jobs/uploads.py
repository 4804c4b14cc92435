"""Files users upload, stored under the data folder with generated names.

A user's file name is never used as a path: ``../../x`` cannot escape the uploads folder.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from core.files import write_atomic


def save_upload(uploads_dir: Path, original_name: str, data: bytes | BinaryIO) -> Path:
    """Writes an uploaded file under a generated name that keeps a readable stem; a stream
    is copied in blocks, so the upload is not held twice in memory."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", Path(original_name).stem).strip("-")[:40] or "upload"
    name = f"{datetime.now(UTC):%Y%m%d_%H%M%S}_{secrets.token_hex(3)}_{stem}.jsonl"
    path = uploads_dir / name
    write_atomic(path, data)
    return path
