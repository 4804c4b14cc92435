"""Who owns a sample, and who may change what its owner sets.

Where sign-in is on, a sample records who drew it (the signed-in email) as its owner, in
``sample_owners.jsonl`` in the data folder (``core.human.files``; the latest line of a
sample wins, a line per change, read whole). Only the owner or an admin (``[access]
admins``, ``core.access``) may then change the sample's label schema and guidelines
(``core.human.label_schemas``) and its queue (``core.human.queues``), or set an item's
final label (``core.store.agreement.adjudicate``); others see them read-only, with the
reason. An admin may name another owner.

A sample with no recorded owner (drawn without sign-in, or before owners were kept) stays
open to anyone, as it always was, until an admin names its owner. Without sign-in there is
one user, this machine's, who owns everything: nothing is refused. The command line has
the data folder's own access: it is this machine's user acting as an admin.

:func:`change_refusal` is the one rule of who may change a sample; Review's page, ``core
review schema`` and ``core review adjudicate`` call it. :func:`set_owner_refusal` is the
rule of who may name an owner; the page's form and ``core review owner --set`` call it.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import NamedTuple

from core.access import AccessConfig
from core.human.files import OWNERS, OwnerRecord, append, now_utc, read_from

OWNER_CHARS = 320  # an email's longest


class OwnerError(ValueError):
    """An owner that cannot be set; the message says why."""


class Who(NamedTuple):
    """Who asks to change a sample: the name an owner is recorded under (the signed-in
    email; this machine's user without sign-in) and whether they are an admin."""

    user: str
    admin: bool = False


def signed_in(email: str | None, access: AccessConfig) -> Who:
    """The page's user: the signed-in email (an admin when ``[access] admins`` names it),
    else this machine's user, who owns everything without sign-in."""
    if not access.sign_in or not email:
        return Who(getpass.getuser(), admin=not access.sign_in)
    admins = {a.strip().lower() for a in access.admins}
    return Who(email.strip(), admin=email.strip().lower() in admins)


def command_line() -> Who:
    """The command line's user: this machine's, with the data folder's own access."""
    return Who(getpass.getuser(), admin=True)


def owner_of(folder: Path, sample_id: str) -> str | None:
    """The sample's owner as last recorded (None: none recorded)."""
    found = None
    for _, record in read_from(folder / OWNERS, 0, 0).records:
        if isinstance(record, OwnerRecord) and record.sample_id == sample_id:
            found = record.owner
    return found


def record_owner(folder: Path, sample_id: str, owner: str, by: str) -> str:
    """Records ``owner`` as the sample's owner (``by``: who says so); returns it.

    Raises:
        OwnerError: an empty owner, or one too long or holding control characters.
    """
    owner = owner.strip()
    if not owner:
        raise OwnerError("name the owner (their sign-in email)")
    if len(owner) > OWNER_CHARS or not owner.isprintable():
        raise OwnerError(f"an owner is at most {OWNER_CHARS} characters, no control characters")
    append(folder, OwnerRecord(sample_id=sample_id, owner=owner, by=by, at=now_utc()))
    return owner


def change_refusal(folder: Path, sample_id: str, who: Who, sign_in: bool) -> str | None:
    """Why ``who`` may not change the sample's schema, guidelines and queue, or set an
    item's final label; None when they may (no sign-in, an admin, the owner, or a sample
    with no recorded owner)."""
    if not sign_in or who.admin:
        return None
    owner = owner_of(folder, sample_id)
    if owner is None or owner.casefold() == who.user.strip().casefold():
        return None
    return (
        f"Read-only: only this sample's owner ({owner}) or an admin may change its schema, "
        "guidelines and queue, or set final labels."
    )


def set_owner_refusal(who: Who, sign_in: bool) -> str | None:
    """Why ``who`` may not name a sample's owner (only an admin may, where sign-in is on)."""
    if not sign_in:
        return "without sign-in there is one user, who owns every sample"
    return None if who.admin else "only an admin may name a sample's owner"
