"""API keys: who may call the API from beyond this machine.

``python -m core keys create NAME`` prints a key once; only its SHA-256 is kept, in
``api_keys.json`` in the data folder. A key's name is the owner of the files and batches
made with it, and a key sees only its own. On a loopback address any key (or none) is
accepted, as the app admits anyone on this machine.

A key is 32 random bytes, so one round of SHA-256 is enough to store it: there is nothing
to guess that a slow hash would protect.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from pydantic import BaseModel, Field, TypeAdapter

from core.files import write_atomic
from core.schemas import now_iso

KEY_PREFIX = "bs-"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$"


class KeyRecord(BaseModel):
    """One key as stored: its name (the owner), the hash of the key, and when it was made."""

    name: str = Field(pattern=NAME_PATTERN)
    sha256: str
    created_at: str
    hint: str = ""  # the key's first characters, so a person can tell keys apart


_RECORDS = TypeAdapter(list[KeyRecord])


class KeyProblem(ValueError):
    """A key that cannot be made or revoked, with why."""


def keys_file(home: Path) -> Path:
    return home / "api_keys.json"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()


def read_keys(home: Path) -> list[KeyRecord]:
    """The stored keys (none when the file does not exist)."""
    try:
        return _RECORDS.validate_json(keys_file(home).read_bytes())
    except FileNotFoundError:
        return []


def create_key(home: Path, name: str) -> str:
    """Makes a key named ``name`` and returns it (the only time it is seen).

    Raises:
        KeyProblem: the name is not a plain name, or a key has it already.
    """
    records = read_keys(home)
    if any(r.name == name for r in records):
        raise KeyProblem(f"a key named {name!r} exists; revoke it first, or choose another name")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    try:
        record = KeyRecord(name=name, sha256=_digest(key), created_at=now_iso(), hint=key[:7])
    except ValueError:
        raise KeyProblem(
            f"{name!r}: a key's name is letters, digits and . _ @ - (at most 64)"
        ) from None
    write_atomic(keys_file(home), _RECORDS.dump_json([*records, record], indent=1).decode())
    return key


def revoke_key(home: Path, name: str) -> None:
    """Removes the key named ``name``; its holder is refused from now on.

    Raises:
        KeyProblem: there is no such key.
    """
    records = read_keys(home)
    kept = [r for r in records if r.name != name]
    if len(kept) == len(records):
        raise KeyProblem(f"no key named {name!r}")
    write_atomic(keys_file(home), _RECORDS.dump_json(kept, indent=1).decode())


# keys file -> (its stat, [(sha256, name)]): every API call with a key asks, so the file is
# parsed again only when it changed (a key made or revoked replaces it).
_KEPT: dict[Path, tuple[tuple[int, int, int, int], list[tuple[str, str]]]] = {}


def owner_of(home: Path, key: str) -> str | None:
    """The name of the stored key ``key`` is, or None when it is none of them."""
    digest = _digest(key)
    path = keys_file(home)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    stamp = (info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_size)
    kept = _KEPT.get(path)
    if kept is None or kept[0] != stamp:
        kept = stamp, [(r.sha256, r.name) for r in read_keys(home)]
        _KEPT[path] = kept
    for sha256, name in kept[1]:
        if hmac.compare_digest(sha256, digest):
            return name
    return None
