"""An upload's multipart form as the streaming parser reads it: the ``file`` part goes
straight into the file it is kept in, the few small fields into memory.

A part's name and file name are read from the bytes as sent: UTF-8 (RFC 7578, and what
httpx and so both official SDKs send between the quotes), else Latin-1, and an RFC 5987
``filename*=UTF-8''...`` wins where a client sends one (RFC 6266).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote_to_bytes

from python_multipart.multipart import parse_options_header

from core.api.errors import ApiError

MAX_UPLOAD_ENV = "BATCH_STUDIO_API_MAX_UPLOAD_MB"
FILENAME_MAX = 255


def too_large(limit: int) -> ApiError:
    return ApiError(
        400,
        f"The file is larger than this server's limit of {limit:,} bytes "
        f"(set {MAX_UPLOAD_ENV} to change it); split it into smaller batches.",
        param="file",
        code="file_too_large",
    )


@dataclass
class Form:
    """What the streaming parser has read so far; the file part goes into ``out``."""

    out: BinaryIO
    limit: int
    purpose: bytearray = field(default_factory=bytearray)
    # expires_after as the SDK sends a nested object in a form: expires_after[anchor] ...
    expires: dict[str, bytearray] = field(default_factory=dict)
    filename: str | None = None
    size: int = 0
    _name: str | None = None
    _header_field: bytearray = field(default_factory=bytearray)
    _header_value: bytearray = field(default_factory=bytearray)
    _headers: dict[str, bytes] = field(default_factory=dict)
    ended: bool = False  # the closing boundary was read: the form is whole

    def callbacks(self) -> dict:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": lambda d, s, e: self._header_field.extend(d[s:e]),
            "on_header_value": lambda d, s, e: self._header_value.extend(d[s:e]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_end": self._end,
        }

    def _end(self) -> None:
        self.ended = True

    def _part_begin(self) -> None:
        self._headers, self._name = {}, None

    def _header_end(self) -> None:
        name = self._header_field.decode("latin-1").strip().lower()
        self._headers[name] = bytes(self._header_value)  # decoded per parameter: RFC 7578
        self._header_field.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        disposition = self._headers.get("content-disposition", b"")
        # Bytes in, bytes out (latin-1 both ways): the parameters keep the bytes as sent.
        _, options = parse_options_header(disposition)
        self._name = _text(options.get(b"name", b""))
        if self._name == "file":
            if self.filename is not None:
                raise ApiError(400, "Send one file per upload.", param="file")
            raw = _extended_filename(disposition) or _text(options.get(b"filename", b""))
            self.filename = Path(raw.replace("\\", "/")).name[:FILENAME_MAX] or "upload.jsonl"

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._name == "file":
            self.size += end - start
            if self.size > self.limit:
                raise too_large(self.limit)
            self.out.write(data[start:end])
        elif self._name == "purpose" and len(self.purpose) < 100:
            self.purpose.extend(data[start:end])
        elif self._name in ("expires_after[anchor]", "expires_after[seconds]"):
            value = self.expires.setdefault(self._name, bytearray())
            if len(value) < 100:
                value.extend(data[start:end])


def _text(value: bytes) -> str:
    """A form parameter's text: UTF-8, as RFC 7578 and every SDK send it (httpx puts the
    name's UTF-8 bytes between the quotes); else Latin-1, the header's own charset."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


_EXTENDED = re.compile(rb"""(?i)(?:^|;)\s*filename\*\s*=\s*([\w!#$%&+^`{}~-]+)'[^']*'([^;\s]+)""")


def _extended_filename(disposition: bytes) -> str | None:
    """The RFC 5987 ``filename*=UTF-8''...`` of a Content-Disposition, which some clients
    send beside (or instead of) ``filename`` and which wins over it (RFC 6266, 4.3)."""
    found = _EXTENDED.search(disposition)
    if found is None:
        return None
    charset = found[1].decode("ascii").lower()
    try:
        return unquote_to_bytes(found[2].decode("ascii")).decode(charset)
    except (LookupError, UnicodeDecodeError):
        return None
