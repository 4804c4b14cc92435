"""Files users upload (or fetch from object storage), stored under the data folder with
generated names.

A user's file name is never used as a path: ``../../x`` cannot escape the uploads folder.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from core.files import write_atomic
from core.storage.s3 import S3Location, StorageError, fetch


def _upload_path(uploads_dir: Path, original_name: str) -> Path:
    """A new path in the uploads folder that keeps a readable stem of ``original_name``."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", Path(original_name).stem).strip("-")[:40] or "upload"
    name = f"{datetime.now(UTC):%Y%m%d_%H%M%S}_{secrets.token_hex(3)}_{stem}.jsonl"
    return uploads_dir / name


def save_upload(uploads_dir: Path, original_name: str, data: bytes | BinaryIO) -> Path:
    """Writes an uploaded file under a generated name that keeps a readable stem; a stream
    is copied in blocks, so the upload is not held twice in memory."""
    path = _upload_path(uploads_dir, original_name)
    write_atomic(path, data)
    return path


def fetch_upload(uploads_dir: Path, uri: str) -> Path:
    """Copies the object ``uri`` (``s3://bucket/key.jsonl``) into the uploads folder,
    streamed, under a generated name; the caller checks and submits it like an upload.

    Raises:
        StorageError: the URI is malformed or the object cannot be read (named, with why).
    """
    try:
        key = S3Location.parse(uri).key
    except ValueError as exc:
        raise StorageError(str(exc)) from None
    return fetch(uri, _upload_path(uploads_dir, key))
