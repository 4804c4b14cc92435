"""The studio's model names: which local model folder a line's ``body.model`` runs on.

One mapping serves every way in (the Batch API, ``core check`` / ``core run``, the inbox,
Upload & check and Run): each model folder answers to its own name, and the names a person
maps on Settings (a hosted model's, ``gpt-4o-mini``) answer to the folder they name. The
mapped names are kept in ``models.json`` in the data folder; a name mapped nowhere runs on
the job's model, as before.

A name may map to a LoRA adapter folder (:mod:`core.adapters`) as well: its lines run on
the adapter's base with the adapter. An adapter folder under the models folder answers to
its own name too; ``core models add-adapter`` maps a name to one and keeps the base it was
given beside it (``bases``), else the base is the one the adapter's config names.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from core.adapters import (
    ADAPTER_WEIGHTS,
    Adapter,
    AdapterError,
    adapter_folders,
    is_adapter_folder,
    read_adapter,
)
from core.config import data_paths
from core.files import write_atomic
from core.model_folders import (
    ModelError,
    check_model_folder,
    is_embedding_model,
    is_model_folder,
    model_folders,
)

NAMES_FILE = "models.json"
NAME_MAX = 200


class ModelNames(BaseModel):
    """``models.json``: a hosted model's name -> the local model folder it runs on."""

    names: dict[str, str] = Field(default_factory=dict)
    # An adapter folder -> the base model folder it runs on, where one was given.
    bases: dict[str, str] = Field(default_factory=dict)


def names_path(home: Path | None = None) -> Path:
    return (home or data_paths().home) / NAMES_FILE


def read_kept(home: Path | None = None) -> ModelNames:
    """``models.json`` as kept (empty when there is none, or it cannot be read: a broken
    file is named on Settings, never a reason for a batch to fail)."""
    try:
        return ModelNames.model_validate_json(names_path(home).read_bytes())
    except (OSError, ValidationError, ValueError):
        return ModelNames()


def read_names(home: Path | None = None) -> dict[str, str]:
    """The mapped names (see :func:`read_kept`)."""
    return read_kept(home).names


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


def write_names(
    names: dict[str, str], home: Path | None = None, bases: dict[str, str] | None = None
) -> dict[str, str]:
    """Checks and keeps the mapped names; returns them as kept (folders resolved).

    Args:
        names: each name -> a model folder or an adapter folder.
        bases: an adapter folder -> the base it runs on (else its config's); those kept
            before stay unless given again.

    Raises:
        ValueError: a name is empty, too long or a model folder's own name, or a folder
            is neither a model folder nor an adapter that fits its base; nothing is
            written then.
    """
    folders = {f.name for f in model_folders()}
    kept_before = read_kept(home)
    given = {str(Path(a).expanduser().resolve()): b for a, b in (bases or {}).items()}
    kept: dict[str, str] = {}
    kept_bases: dict[str, str] = {}
    for raw_name, raw_folder in names.items():
        name = raw_name.strip()
        if not name or len(name) > NAME_MAX:
            raise ValueError(f"a model name is 1 to {NAME_MAX} characters, not {raw_name!r}")
        if name in folders:
            raise ValueError(f"{name!r} is a model folder's own name: it already runs there")
        if not raw_folder:
            raise ValueError(f"{name!r} runs on no model: pick one")
        folder = Path(raw_folder).expanduser().resolve()
        if is_adapter_folder(folder):
            base = given.get(str(folder)) or kept_before.bases.get(str(folder))
            try:
                adapter = read_adapter(folder, base, name)
            except AdapterError as exc:
                raise ValueError(f"{name!r}: {exc}") from exc
            if base:
                kept_bases[str(folder)] = adapter.base
        elif not is_model_folder(folder):
            raise ValueError(f"{name!r} maps to {folder}, which is not a model folder")
        kept[name] = str(folder)
    kept_names = ModelNames(names=kept, bases=kept_bases)
    write_atomic(names_path(home), json.dumps(kept_names.model_dump(), indent=1) + "\n")
    return kept


def add_adapter(
    name: str, folder: str | Path, base: str | Path, home: Path | None = None
) -> Adapter:
    """Maps ``name`` to the adapter in ``folder`` on ``base`` (a model folder, or the name
    of one under the models folder), keeping the names mapped before.

    Raises:
        ValueError: as :func:`write_names`, with what is wrong with the adapter.
    """
    if not str(folder).strip():
        raise ValueError("give the adapter's folder")
    if not str(base).strip():
        raise ValueError("give the base model folder the adapter runs on")
    by_name = {f.name: f for f in model_folders()}
    base_folder = by_name.get(str(base)) or Path(base).expanduser().resolve()
    folder = Path(folder).expanduser().resolve()
    try:
        adapter = read_adapter(folder, base_folder, name.strip())
    except AdapterError as exc:
        raise ValueError(str(exc)) from exc
    names = {**read_names(home), name: str(folder)}
    write_names(names, home, {str(folder): str(base_folder)})
    return adapter


def adapters_of(model_map: dict[str, str], home: Path | None = None) -> dict[str, Adapter]:
    """The usable adapters among a job's mapped folders, by folder, each checked against
    its base (the one kept for it, else its config's) and named by the first name mapped
    to it: what ``job.json`` records (``JobSpec.adapters``). An unusable one is left out:
    the check refuses the lines that name it (:func:`line_models`)."""
    return line_models(model_map, home=home).adapters


# What to do about a name whose lines cannot run: said after why, in every refusal.
RENAME = (
    "fix the folder, or map {name!r} to another model or adapter "
    "(core models add-adapter NAME FOLDER --base BASE, --map NAME=FOLDER, or Settings)"
)


@dataclass(frozen=True)
class LineModels:
    """What a job's mapped names run on, as the batch check reads them (the one rule that
    the check, and so ``core check``, Upload & check, the Batch API and submit, apply).

    Attributes:
        model_map: each name whose lines can run -> the folder that counts their tokens: a
            model folder, or an adapter's base (vLLM tokenizes an adapter's requests with its
            base's tokenizer: a tokenizer shipped in the adapter folder is not read).
        refused: each name whose lines cannot run -> why, with what to do: its folder is
            gone or no model or adapter, or the adapter cannot run on its base.
        other_base: each adapter on a base that is not the job's model -> what that means.
        own_tokenizer: each adapter whose folder ships a tokenizer other than its base's ->
            a note that its lines are counted (and run) with the base's.
        adapters: the usable adapters, by folder (what ``job.json`` records).
    """

    model_map: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    other_base: dict[str, str] = field(default_factory=dict)
    own_tokenizer: dict[str, str] = field(default_factory=dict)
    adapters: dict[str, Adapter] = field(default_factory=dict)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")


def _ships_other_tokenizer(adapter: Path, base: Path) -> bool:
    """Whether the adapter folder holds a tokenizer file that is not its base's own."""
    for name in TOKENIZER_FILES:
        own, base_file = adapter / name, base / name
        if own.is_file() and (
            not base_file.is_file()
            or own.stat().st_size != base_file.stat().st_size
            or own.read_bytes() != base_file.read_bytes()
        ):
            return True
    return False


def line_models(
    model_map: Mapping[str, str], job_model: str | Path | None = None, home: Path | None = None
) -> LineModels:
    """Each mapped name checked as the lines that name it will run: a model folder (it
    exists and has a config), or an adapter that :func:`core.adapters.read_adapter` passes
    on the base kept for it (else its config's): a LoRA adapter of rank 1 to 512 with its
    weights, every matrix fitting a module of the base. Names no line uses cost nothing
    but this read of config files and safetensors headers.

    Args:
        model_map: body ``model`` name -> model or adapter folder, as given.
        job_model: the model the job runs (its lines that name no mapped model run there);
            an adapter on another base is named in ``other_base``.
    """
    bases = read_kept(home).bases
    job = Path(job_model).expanduser().resolve() if job_model else None
    found = LineModels()
    for name, raw in model_map.items():
        folder = Path(raw).expanduser().resolve()
        what_to_do = RENAME.format(name=name)
        # A folder kept as an adapter, or holding an adapter's weights, is judged as one
        # (gone, or its config lost), so its refusal says so.
        was_adapter = str(folder) in bases or (folder / ADAPTER_WEIGHTS).is_file()
        if not is_adapter_folder(folder) and not was_adapter:
            try:
                check_model_folder(folder)
            except ModelError as exc:
                found.refused[name] = (
                    f"body.model {name!r} runs on {folder}, but {exc}: {what_to_do}"
                )
            else:
                found.model_map[name] = raw
            continue
        adapter = found.adapters.get(str(folder))
        try:
            adapter = adapter or read_adapter(folder, bases.get(str(folder)), name)
        except AdapterError as exc:
            found.refused[name] = (
                f"body.model {name!r} is a LoRA adapter that cannot run: {exc}; {what_to_do}"
            )
            continue
        found.adapters[str(folder)] = adapter
        found.model_map[name] = adapter.base
        base = Path(adapter.base)
        if _ships_other_tokenizer(folder, base):
            found.own_tokenizer[name] = (
                f"body.model {name!r} ships its own tokenizer ({folder}), but vLLM tokenizes "
                f"an adapter's requests with its base's ({base.name}): its prompt tokens are "
                "counted with the base's; to run it with its own, make that the base's"
            )
        if job is not None and base != job:
            found.other_base[name] = (
                f"body.model {name!r} is a LoRA adapter on {base.name} ({base}), not on the "
                f"job's model {job.name}: its lines load {base.name} as well; run the job on "
                f"{base} to run them on one model"
            )
    return found


def folder_choices(home: Path | None = None) -> dict[str, str]:
    """What a name may run on (Settings' choices), by the folder's name: each model folder
    that is ready, then each adapter folder, under the models folder or mapped already."""
    choices = {f.name: str(f) for f in model_folders() if is_model_folder(f)}
    adapters = [*adapter_folders(), *map(Path, read_names(home).values())]
    for folder in adapters:
        if is_adapter_folder(folder):
            choices.setdefault(folder.name, str(folder))
    return choices


def studio_model_map(home: Path | None = None) -> dict[str, str]:
    """What a line's ``body.model`` runs on: each chat model folder by its own name (an
    embeddings line without a mapping runs on the embedding model anyway), each adapter
    folder under the models folder by its own, then the mapped names. A mapped folder
    that is gone (or no longer a model or an adapter) stays: the check refuses the lines
    that name it, rather than run them on the job's model (:func:`line_models`)."""
    mapping = {
        f.name: str(f) for f in model_folders() if is_model_folder(f) and not is_embedding_model(f)
    }
    mapping.update({f.name: str(f) for f in adapter_folders() if f.name not in mapping})
    mapping.update(read_names(home))
    return mapping
