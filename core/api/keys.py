"""API keys: who may call the API from beyond this machine.

``python -m core keys create NAME`` prints a key once; only its SHA-256 is kept, in
``api_keys.json`` in the data folder. A key owns the files and batches made with it, and
sees only its own: by its id, made with it, never by its name, so a key made later with a
revoked key's name inherits nothing (:func:`core.api.files.visible`). A revoked key stays
in the file, refused, so its id and name still say whose its work was.

Who calls is one rule, :func:`caller_for`: a request that presents a key is judged by that
key wherever it comes from (an unknown or revoked key is refused, never taken for this
machine's user: an SSH tunnel or a port-forward makes remote traffic arrive from
127.0.0.1). Only a request with no key from a loopback address is this machine's user, who
sees everything, as the app admits anyone on this machine; ``api_access.json``'s
``keys_on_loopback`` (Settings, ``core keys loopback require``) refuses that too.

A key is 32 random bytes, so one round of SHA-256 is enough to store it: there is nothing
to guess that a slow hash would protect.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, Field, TypeAdapter

from core.files import write_atomic
from core.schemas import now_iso

KEY_PREFIX = "bs-"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$"


class KeyRecord(BaseModel):
    """One key as stored: its id and name, the hash of the key, and when it was made."""

    name: str = Field(pattern=NAME_PATTERN)
    sha256: str
    created_at: str
    hint: str = ""  # the key's first characters, so a person can tell keys apart
    id: str = ""  # made with the key; "": a key made before keys had ids (see identity)
    revoked_at: str | None = None  # when it was revoked; None: in use

    @property
    def identity(self) -> str:
        """What owns the key's work: its id, or for a key made before ids one derived from
        its hash (as stable as the key itself)."""
        return self.id or f"key-{self.sha256[:16]}"

    def caller(self) -> Caller:
        return Caller(self.identity, self.name, _epoch(self.created_at), legacy=not self.id)


@dataclass(frozen=True)
class Caller:
    """Who calls the API with a key.

    Attributes:
        key_id: the key's :attr:`KeyRecord.identity`, which owns what it makes.
        name: the key's name (shown as the owner).
        since: when the key was made (epoch seconds).
        legacy: made before keys had ids, when the name owned things; only such a key
            may own a record that names its owner by name alone.
    """

    key_id: str
    name: str
    since: int
    legacy: bool = False


_RECORDS = TypeAdapter(list[KeyRecord])


def _epoch(iso: str) -> int:
    try:
        return int(datetime.fromisoformat(iso).timestamp())
    except ValueError:
        return 0


class KeyProblem(ValueError):
    """A key that cannot be made or revoked, with why."""


class ApiAccess(BaseModel):
    """``api_access.json`` in the data folder: who the API admits on this machine."""

    keys_on_loopback: bool = False  # True: a call from loopback needs a key too


class KeyRefused(ValueError):
    """A call the API refuses (401): no key where one is needed, or a key that is not one in
    use; the message says which and what to do."""


def keys_file(home: Path) -> Path:
    return home / "api_keys.json"


def access_file(home: Path) -> Path:
    return home / "api_access.json"


def read_access(home: Path) -> ApiAccess:
    """The access setting; the default (a loopback call needs no key) when none is saved.
    A damaged file requires keys: it is read on every call, and failing open would admit
    everyone on this machine whatever was set."""
    try:
        return ApiAccess.model_validate_json(access_file(home).read_bytes())
    except FileNotFoundError:
        return ApiAccess()
    except (OSError, ValueError):
        return ApiAccess(keys_on_loopback=True)


def write_access(home: Path, access: ApiAccess) -> None:
    write_atomic(access_file(home), access.model_dump_json(indent=1))


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()


def _read_all(home: Path) -> list[KeyRecord]:
    """Every stored key, revoked ones too (none when the file does not exist)."""
    try:
        return _RECORDS.validate_json(keys_file(home).read_bytes())
    except FileNotFoundError:
        return []


def read_keys(home: Path) -> list[KeyRecord]:
    """The keys in use (not revoked)."""
    return [r for r in _read_all(home) if r.revoked_at is None]


def revoked_with_name(home: Path, name: str) -> list[KeyRecord]:
    """The revoked keys that had ``name``: a new key of that name sees none of their work."""
    return [r for r in _read_all(home) if r.name == name and r.revoked_at is not None]


def create_key(home: Path, name: str) -> str:
    """Makes a key named ``name`` and returns it (the only time it is seen).

    Raises:
        KeyProblem: the name is not a plain name, or a key in use has it (a revoked
            key's name may be reused: the new key is another owner).
    """
    records = _read_all(home)
    if any(r.name == name and r.revoked_at is None for r in records):
        raise KeyProblem(f"a key named {name!r} exists; revoke it first, or choose another name")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    try:
        record = KeyRecord(
            name=name,
            sha256=_digest(key),
            created_at=now_iso(),
            hint=key[:7],
            id=f"key_{secrets.token_hex(8)}",
        )
    except ValueError:
        raise KeyProblem(
            f"{name!r}: a key's name is letters, digits and . _ @ - (at most 64)"
        ) from None
    write_atomic(keys_file(home), _RECORDS.dump_json([*records, record], indent=1).decode())
    return key


def revoke_key(home: Path, name: str) -> None:
    """Revokes the key named ``name``: its holder is refused from now on; its record stays
    (marked revoked), so what it made stays its own and a later key of that name gets none.

    Raises:
        KeyProblem: there is no such key.
    """
    records = _read_all(home)
    live = [r for r in records if r.name == name and r.revoked_at is None]
    if not live:
        raise KeyProblem(f"no key named {name!r}")
    when = now_iso()
    kept = [r.model_copy(update={"revoked_at": when}) if r in live else r for r in records]
    write_atomic(keys_file(home), _RECORDS.dump_json(kept, indent=1).decode())


# keys file -> (its stat, [(sha256, caller)]): every API call with a key asks, so the file
# is parsed again only when it changed (a key made or revoked replaces it).
_KEPT: dict[Path, tuple[tuple[int, int, int, int], list[tuple[str, Caller]]]] = {}


def owner_of(home: Path, key: str) -> Caller | None:
    """Who the stored key ``key`` is, or None when it is none of those in use."""
    digest = _digest(key)
    path = keys_file(home)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    stamp = (info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_size)
    kept = _KEPT.get(path)
    if kept is None or kept[0] != stamp:
        kept = stamp, [(r.sha256, r.caller()) for r in read_keys(home)]
        _KEPT[path] = kept
    for sha256, caller in kept[1]:
        if hmac.compare_digest(sha256, digest):
            return caller
    return None


def caller_for(home: Path, key: str, loopback: bool) -> Caller | None:
    """Who calls with ``key`` ("" for none) from a loopback address or not: a key's
    :class:`Caller`, or None for this machine's user (no key, from loopback, while
    :attr:`ApiAccess.keys_on_loopback` is off). The one rule every API entry asks.

    Raises:
        KeyRefused: a key that is not one in use (unknown or revoked), wherever it comes
            from; no key beyond loopback, or on loopback when keys are required there.
    """
    if key:
        owner = owner_of(home, key)
        if owner is None:
            raise KeyRefused(
                f"Incorrect API key provided: {key[:7]}***. It is not a key in use here "
                "(unknown or revoked); ask for a key, or call without one from this machine."
            )
        return owner
    if loopback and not read_access(home).keys_on_loopback:
        return None
    where = "on this machine too (Settings)" if loopback else "beyond this machine"
    raise KeyRefused(
        f"You didn't provide an API key; one is required {where}. Send 'Authorization: "
        "Bearer KEY'; a key is made with `python -m core keys create NAME` on the server."
    )
