"""Files users upload, stored under the data folder with generated names.

A user's file name is never used as a path: ``../../x`` cannot escape the uploads folder.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from pathlib import Path


def save_upload(uploads_dir: Path, original_name: str, data: bytes) -> Path:
    """Writes an uploaded file under a generated name that keeps a readable stem."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", Path(original_name).stem).strip("-")[:40] or "upload"
    name = f"{datetime.now(UTC):%Y%m%d_%H%M%S}_{secrets.token_hex(3)}_{stem}.jsonl"
    uploads_dir.mkdir(parents=True, exist_ok=True)
    path = uploads_dir / name
    path.write_bytes(data)
    return path
