"""Webhook endpoints: the URLs whoever runs the studio registered (``core webhooks add``,
Settings), each with the events it wants and its ``whsec_`` secret.

Only this machine's user registers an endpoint, and any URL they choose (loopback
included); nothing a key's request sends ever names an address the studio calls. The
dispatcher signs with the secret, so it is kept as is, like a private key: in
``webhooks/endpoints.json``, a file only its owner may read (mode 0600), in a folder only
its owner may enter. ``rotate`` makes a new secret; the old one signs beside it for 24 h,
so receivers can change theirs without missing an event.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, TypeAdapter

from core.files import write_atomic
from core.schemas import now_iso
from core.webhooks.signing import new_secret

EventType = Literal["batch.completed", "batch.failed", "batch.cancelled", "batch.expired"]
EVENT_TYPES: tuple[EventType, ...] = (
    "batch.completed",
    "batch.failed",
    "batch.cancelled",
    "batch.expired",
)
OLD_SECRET_SECONDS = 24 * 3600  # how long a rotated-out secret still signs


class WebhookProblem(ValueError):
    """A URL that cannot be called, an unknown endpoint: said so a person can fix it."""


class Endpoint(BaseModel):
    """One registered endpoint as stored (secrets included: the file is the owner's alone)."""

    id: str
    url: str
    events: list[EventType]
    secret: str
    created_at: str
    old_secret: str | None = None  # the secret before the last rotation
    old_secret_until: float | None = None  # epoch seconds: it signs until then

    def signing_secrets(self, now: float) -> list[str]:
        """The secrets that sign an event sent at ``now``: the new, and the old one for 24 h
        after a rotation."""
        old = self.old_secret_until is not None and now < self.old_secret_until
        return [self.secret, self.old_secret] if old and self.old_secret else [self.secret]


_ENDPOINTS = TypeAdapter(list[Endpoint])


def webhooks_dir(home: Path) -> Path:
    return home / "webhooks"


def endpoints_file(home: Path) -> Path:
    return webhooks_dir(home) / "endpoints.json"


def read_endpoints(home: Path) -> list[Endpoint]:
    """The endpoints registered (none when none ever was)."""
    try:
        return _ENDPOINTS.validate_json(endpoints_file(home).read_bytes())
    except FileNotFoundError:
        return []


def _write(home: Path, endpoints: list[Endpoint]) -> None:
    folder = webhooks_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    path = endpoints_file(home)
    write_atomic(path, _ENDPOINTS.dump_json(endpoints, indent=1).decode())
    path.chmod(0o600)  # write_atomic's file is made 0600 already; said here, not assumed


def check_url(url: str) -> str:
    """``url`` when it is an http(s) URL with a host; else :class:`WebhookProblem`."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookProblem(f"{url!r}: give an http:// or https:// URL with a host")
    return url.strip()


def add_endpoint(home: Path, url: str, events: list[str] | None = None) -> Endpoint:
    """Registers ``url`` for ``events`` (all four when none) and returns it, with its new
    secret (shown to the person once)."""
    wanted = list(dict.fromkeys(events or EVENT_TYPES))
    unknown = [e for e in wanted if e not in EVENT_TYPES]
    if unknown:
        raise WebhookProblem(f"unknown event {unknown[0]!r}: choose from {', '.join(EVENT_TYPES)}")
    endpoint = Endpoint(
        id=f"we_{secrets.token_hex(8)}",
        url=check_url(url),
        events=wanted,
        secret=new_secret(),
        created_at=now_iso(),
    )
    _write(home, [*read_endpoints(home), endpoint])
    return endpoint


def find_endpoint(endpoints: list[Endpoint], ref: str) -> Endpoint:
    """The endpoint whose id, or else whose URL, is ``ref``."""
    found = [e for e in endpoints if e.id == ref] or [e for e in endpoints if e.url == ref]
    if len(found) != 1:
        why = "no endpoint" if not found else f"{len(found)} endpoints have"
        raise WebhookProblem(f"{why} {ref!r}: give an id from `python -m core webhooks list`")
    return found[0]


def remove_endpoint(home: Path, ref: str) -> Endpoint:
    """Removes an endpoint (by id or URL); events not yet sent to it are not sent."""
    endpoints = read_endpoints(home)
    gone = find_endpoint(endpoints, ref)
    _write(home, [e for e in endpoints if e.id != gone.id])
    return gone


def rotate_secret(home: Path, ref: str, now: float | None = None) -> Endpoint:
    """Gives an endpoint a new secret (returned, shown once); the old one signs beside it
    for 24 h."""
    now = time.time() if now is None else now
    endpoints = read_endpoints(home)
    old = find_endpoint(endpoints, ref)
    new = old.model_copy(
        update={
            "secret": new_secret(),
            "old_secret": old.secret,
            "old_secret_until": now + OLD_SECRET_SECONDS,
        }
    )
    _write(home, [new if e.id == old.id else e for e in endpoints])
    return new


def has_endpoints(home: Path) -> bool:
    """Whether any endpoint may want an event (one ``stat``: asked at every job end)."""
    return os.path.exists(endpoints_file(home))
