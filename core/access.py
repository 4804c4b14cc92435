"""Who may use the studio.

On this machine alone (the server bound to a loopback address) anyone who can reach the
page is the user. To share the studio, sign-in is configured with Streamlit's OpenID
Connect login (``st.login``): the ``[auth]`` section of ``.streamlit/secrets.toml``, and
an allow-list in ``[access] allowed_users`` (emails, or ``@example.com`` for a whole
domain; nobody is let in by default). The server refuses to listen beyond loopback
without sign-in unless ``BATCH_STUDIO_OPEN=1`` says so explicitly. ``[access] admins``
names the admins (emails): they approve big jobs (core/jobs/approval.py).
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from pathlib import Path
from typing import NamedTuple

from core.config import REPO_ROOT

OPEN_ENV = "BATCH_STUDIO_OPEN"
SECRETS_FILES = (
    REPO_ROOT / ".streamlit" / "secrets.toml",
    Path.home() / ".streamlit" / "secrets.toml",
)


def is_loopback(address: str | None) -> bool:
    """True for an address only this machine reaches (unset means every interface)."""
    if not address:
        return False
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def allowed(email: str | None, allowed_users: list[str]) -> bool:
    """Whether a signed-in email is on the allow-list (an entry ``@domain`` admits it all)."""
    email = (email or "").strip().lower()
    if "@" not in email:
        return False
    for entry in (e.strip().lower() for e in allowed_users):
        if entry == email or (entry.startswith("@") and email.endswith(entry)):
            return True
    return False


def exposure_problem(address: str | None, sign_in: bool, open_override: bool) -> str | None:
    """Why the studio may not serve on ``address``; None when it may."""
    if is_loopback(address) or sign_in or open_override:
        return None
    where = address or "every network interface"
    return (
        f"Batch Studio will not serve on {where} without sign-in: anyone on the network would "
        "have full access. Configure sign-in ([auth] and [access] in .streamlit/secrets.toml, "
        f"see docs/configuration.md), bind 127.0.0.1, or set {OPEN_ENV}=1 to serve openly on "
        "purpose."
    )


def open_override() -> bool:
    return os.environ.get(OPEN_ENV) == "1"


def sign_in_configured(files: tuple[Path, ...] = SECRETS_FILES) -> bool:
    """Whether a secrets file Streamlit reads has an ``[auth]`` section (for the CLI;
    the app asks ``st.secrets``)."""
    for file in files:
        try:
            if "auth" in tomllib.loads(file.read_text(encoding="utf-8")):
                return True
        except (OSError, tomllib.TOMLDecodeError):
            continue
    return False


class AccessConfig(NamedTuple):
    """Whether sign-in is on, the allow-list and the admins (emails), as configured."""

    sign_in: bool = False
    allowed_users: tuple[str, ...] = ()
    admins: tuple[str, ...] = ()


def access_config(files: tuple[Path, ...] | None = None) -> AccessConfig:
    """The ``[auth]`` and ``[access]`` sections of the secrets files, as Streamlit reads
    them: the home folder's first, the project's over it (for the CLI; the app passes
    ``st.secrets``' to :func:`access_of`)."""
    merged: dict = {}
    for file in reversed(files if files is not None else SECRETS_FILES):
        try:
            merged |= tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            continue
    return access_of("auth" in merged, merged.get("access"))


def access_of(sign_in: bool, access: dict | None) -> AccessConfig:
    access = access or {}
    return AccessConfig(
        sign_in,
        tuple(str(u) for u in access.get("allowed_users", [])),
        tuple(str(a) for a in access.get("admins", [])),
    )
