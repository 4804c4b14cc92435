"""The studio's model names: which local model folder a line's ``body.model`` runs on.

One mapping serves every way in (the Batch API, ``core check`` / ``core run``, the inbox,
Upload & check and Run): each model folder answers to its own name, and the names a person
maps on Settings (a hosted model's, ``gpt-4o-mini``) answer to the folder they name. The
mapped names are kept in ``models.json`` in the data folder; a name mapped nowhere runs on
the job's model, as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from core.config import data_paths
from core.files import write_atomic
from core.model_folders import is_embedding_model, is_model_folder, model_folders

NAMES_FILE = "models.json"
NAME_MAX = 200


class ModelNames(BaseModel):
    """``models.json``: a hosted model's name -> the local model folder it runs on."""

    names: dict[str, str] = Field(default_factory=dict)


def names_path(home: Path | None = None) -> Path:
    return (home or data_paths().home) / NAMES_FILE


def read_names(home: Path | None = None) -> dict[str, str]:
    """The mapped names (empty when none are kept, or the file cannot be read: a broken
    file is named on Settings, never a reason for a batch to fail)."""
    try:
        return ModelNames.model_validate_json(names_path(home).read_bytes()).names
    except (OSError, ValidationError, ValueError):
        return {}


def names_problem(home: Path | None = None) -> str | None:
    """Why ``models.json`` cannot be read; None when it can (or there is none)."""
    path = names_path(home)
    try:
        ModelNames.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError, ValueError) as exc:
        return f"{path} cannot be read ({str(exc).splitlines()[0]}): save the names again"
    return None


def names_from_rows(
    rows: Iterable[Mapping[str, Any]], folders: Mapping[str, str]
) -> dict[str, str]:
    """The rows of an edited names table (``name``, ``model``: a folder's name) as
    :func:`write_names` takes them: each name to its folder's path in ``folders``.

    A cell left empty (NaN, or a folder not in ``folders``) is kept as ``""``, so
    :func:`write_names` names the row at fault instead of this raising.
    """
    return {
        (r["name"] if isinstance(r["name"], str) else ""): folders.get(str(r["model"]), "")
        for r in rows
    }


def write_names(names: dict[str, str], home: Path | None = None) -> dict[str, str]:
    """Checks and keeps the mapped names; returns them as kept (folders resolved).

    Raises:
        ValueError: a name is empty, too long or a model folder's own name, or a folder
            is not a model folder; nothing is written then.
    """
    folders = {f.name for f in model_folders()}
    kept: dict[str, str] = {}
    for raw_name, raw_folder in names.items():
        name = raw_name.strip()
        if not name or len(name) > NAME_MAX:
            raise ValueError(f"a model name is 1 to {NAME_MAX} characters, not {raw_name!r}")
        if name in folders:
            raise ValueError(f"{name!r} is a model folder's own name: it already runs there")
        if not raw_folder:
            raise ValueError(f"{name!r} runs on no model: pick one")
        folder = Path(raw_folder).expanduser().resolve()
        if not is_model_folder(folder):
            raise ValueError(f"{name!r} maps to {folder}, which is not a model folder")
        kept[name] = str(folder)
    write_atomic(names_path(home), json.dumps(ModelNames(names=kept).model_dump(), indent=1) + "\n")
    return kept


def studio_model_map(home: Path | None = None) -> dict[str, str]:
    """What a line's ``body.model`` runs on: each chat model folder by its own name (an
    embeddings line without a mapping runs on the embedding model anyway), then the
    mapped names, whose folders still exist."""
    mapping = {
        f.name: str(f) for f in model_folders() if is_model_folder(f) and not is_embedding_model(f)
    }
    for name, folder in read_names(home).items():
        if is_model_folder(Path(folder)):
            mapping[name] = folder
    return mapping
