"""The Build page's draft, kept per user in the data folder: a browser reload, a new
session or a restart of the app finds the fields as they were left.

``<data folder>/drafts/<user>/build.json`` holds the fields (a :class:`BuildDraft`); an
uploaded table is kept beside it as the bytes that were uploaded (``table.<suffix>``), so
it is read again exactly as the first time.
"""

from __future__ import annotations

import getpass
import hashlib
import re
from pathlib import Path
from typing import NamedTuple

import pandas as pd
from pydantic import Field as PydanticField
from pydantic import ValidationError

from core.config import data_paths
from core.files import write_atomic
from core.plan.tables import BuildError, read_table
from core.schemas import Model, to_json

DRAFT_FILE = "build.json"
FieldValue = str | int | float | bool | list[str] | None


class DraftTable(NamedTuple):
    """The draft's uploaded table, its name, and the SHA-256 of the bytes uploaded (the
    Build page starts a fresh form for another table, told apart by name and content)."""

    frame: pd.DataFrame
    name: str
    sha256: str


class BuildDraft(Model):
    """What the Build page's fields held, by their names, and the uploaded table's name
    (None: no upload; the sample table is a field)."""

    fields: dict[str, FieldValue] = PydanticField(default_factory=dict)
    table_name: str | None = None


def draft_folder(user: str | None, home: Path | None = None) -> Path:
    """The user's drafts folder: the signed-in user's, else this machine's user's (a name
    made safe for a path: one folder per user)."""
    safe = re.sub(r"[^A-Za-z0-9_.@-]+", "_", user or getpass.getuser()).strip(".") or "_"
    return (home or data_paths().home) / "drafts" / safe


def load_draft(user: str | None, home: Path | None = None) -> tuple[BuildDraft, DraftTable | None]:
    """The user's draft and its uploaded table (None: none kept). A draft
    that cannot be read is no draft: it is a convenience, never worth an error."""
    folder = draft_folder(user, home)
    try:
        draft = BuildDraft.model_validate_json((folder / DRAFT_FILE).read_bytes())
    except (OSError, ValidationError):
        return BuildDraft(), None
    if not draft.table_name:
        return draft, None
    try:
        data = (folder / f"table{Path(draft.table_name).suffix}").read_bytes()
        frame = read_table(data, draft.table_name)
        return draft, DraftTable(frame, draft.table_name, hashlib.sha256(data).hexdigest())
    except (OSError, BuildError):
        return draft, None


def save_draft(user: str | None, draft: BuildDraft, home: Path | None = None) -> None:
    write_atomic(draft_folder(user, home) / DRAFT_FILE, to_json(draft))


def save_table(user: str | None, name: str, data: bytes, home: Path | None = None) -> None:
    """Keeps an uploaded table's bytes as the draft's table (the one kept before goes)."""
    folder = draft_folder(user, home)
    for old in folder.glob("table.*"):
        old.unlink(missing_ok=True)
    write_atomic(folder / f"table{Path(name).suffix}", data)
