"""LoRA adapters: a fine-tune that runs as a model of its own on its base model's engine.

An adapter folder is what peft's ``save_pretrained`` writes: ``adapter_config.json`` (its
rank, the modules it changes, the base it was made on) and ``adapter_model.safetensors``.
It answers to a name as a model folder does (``core.model_names``), and a job's lines that
name it run on its base's engine with LoRA on (``core.run.engine``). :func:`read_adapter`
is the one check: the folder is an adapter, its rank is above 0, its weights are there,
and every matrix it adds fits a module of the base (read from the base's safetensors
headers, so an adapter made for another architecture or size is refused with what differs).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from core.config import models_dir
from core.files import read_json
from core.model_folders import ModelError, is_model_folder, model_folders
from core.schemas import Adapter

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# The prefix peft puts before the base's own parameter names.
PEFT_PREFIX = "base_model.model."
# A safetensors header past this is no adapter's (it is read into memory whole).
HEADER_MAX = 100 * 1024 * 1024
# vLLM's LoRA engine takes these ranks only (vllm/config/lora.py, 0.32): a job's engine is
# sized to the least of them that holds its adapters' largest rank.
ENGINE_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class AdapterError(ModelError):
    """A folder that is no usable adapter, or one that does not fit its base."""


def is_adapter_folder(path: Path) -> bool:
    """True for a folder that says it is a peft adapter (checked by :func:`read_adapter`)."""
    return (path / ADAPTER_CONFIG).is_file()


def adapter_folders() -> list[Path]:
    """Adapter folders found directly under the models folder, beside the model folders."""
    root = models_dir()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and is_adapter_folder(p))


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Each tensor's shape in a safetensors file, from its header (no weights are read).

    Raises:
        AdapterError: the file is not a safetensors file.
    """
    try:
        with path.open("rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            if size > HEADER_MAX:
                raise AdapterError(f"{path} is not a safetensors file (its header is too long)")
            header = json.loads(handle.read(size))
    except (OSError, struct.error, ValueError, UnicodeDecodeError) as exc:
        raise AdapterError(f"{path} is not a safetensors file ({exc})") from exc
    if not isinstance(header, dict):
        raise AdapterError(f"{path} is not a safetensors file")
    return {
        name: list(entry.get("shape") or [])
        for name, entry in header.items()
        if name != "__metadata__" and isinstance(entry, dict)
    }


def _config(folder: Path) -> dict[str, Any]:
    config = read_json(folder / ADAPTER_CONFIG)
    if not isinstance(config, dict):
        raise AdapterError(f"{folder / ADAPTER_CONFIG} is not a JSON object")
    return config


def base_of(folder: Path) -> Path | None:
    """The base model folder an adapter's config names (``base_model_name_or_path``): a
    folder on this machine, else the model folder of the same name under the models folder
    (a hub name such as ``HuggingFaceTB/SmolLM2-135M-Instruct`` by its last part); None
    when neither is there."""
    named = _config(folder).get("base_model_name_or_path")
    if not isinstance(named, str) or not named:
        return None
    path = Path(named).expanduser()
    if is_model_folder(path):
        return path.resolve()
    last = named.rstrip("/").rsplit("/", 1)[-1]
    return next((f for f in model_folders() if f.name == last and is_model_folder(f)), None)


def read_adapter(folder: str | Path, base: str | Path | None = None, name: str = "") -> Adapter:
    """The adapter in ``folder``, checked against its base: ``base`` where given, else the
    one its config names (:func:`base_of`).

    Raises:
        AdapterError: the folder is no peft LoRA adapter, its rank is 0, its weights are
            missing, no base is found, or a matrix of it fits no module of the base.
    """
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise AdapterError(f"adapter folder {folder} does not exist")
    if not is_adapter_folder(folder):
        raise AdapterError(f"{folder} is not an adapter: it has no {ADAPTER_CONFIG}")
    config = _config(folder)
    kind = config.get("peft_type")
    if kind != "LORA":
        raise AdapterError(f"{folder} is a {kind or 'unknown'} adapter; only LoRA runs here")
    rank = config.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise AdapterError(f"{folder}: its rank (r) is {rank!r}; a LoRA adapter's is at least 1")
    if rank > ENGINE_RANKS[-1]:
        raise AdapterError(f"{folder}: its rank {rank} is above the engine's {ENGINE_RANKS[-1]}")
    if not (folder / ADAPTER_WEIGHTS).is_file():
        raise AdapterError(f"{folder} has no {ADAPTER_WEIGHTS}: its weights are missing")
    base_folder = Path(base).expanduser().resolve() if base else base_of(folder)
    if base_folder is None:
        named = config.get("base_model_name_or_path")
        raise AdapterError(
            f"{folder}: its base model {named!r} is not a model folder here; give its base"
        )
    if not is_model_folder(base_folder):
        raise AdapterError(f"{folder}: its base {base_folder} is not a model folder")
    check_fits(folder, base_folder)
    return Adapter(name=name or folder.name, folder=str(folder), base=str(base_folder), rank=rank)


def _architectures(folder: Path) -> list[str]:
    config = read_json(folder / "config.json")
    found = config.get("architectures") if isinstance(config, dict) else None
    return [a for a in found if isinstance(a, str)] if isinstance(found, list) else []


def check_fits(adapter: Path, base: Path) -> None:
    """Each of the adapter's LoRA matrices against the base's weight it changes: the
    module must exist in the base, and A's columns and B's rows must be its input and
    output sizes.

    Raises:
        AdapterError: the first module that differs, with both shapes and both
            architectures (an adapter for another model, or another size of the same).
    """
    named = base_of(adapter)
    made_on, runs_on = _architectures(named) if named else [], _architectures(base)
    if made_on and runs_on and made_on != runs_on:
        raise AdapterError(
            f"{adapter} was made on {'/'.join(made_on)} ({named}), "
            f"not on {'/'.join(runs_on)} ({base})"
        )
    weights: dict[str, list[int]] = {}
    for file in sorted(base.glob("*.safetensors")):
        weights.update(safetensors_shapes(file))
    lora = safetensors_shapes(adapter / ADAPTER_WEIGHTS)
    if not any(".lora_A." in key for key in lora):
        raise AdapterError(f"{adapter / ADAPTER_WEIGHTS} holds no LoRA weights (lora_A/lora_B)")
    architecture = "/".join(runs_on) or "the base"
    for key, shape in sorted(lora.items()):
        module, sep, part = key.removeprefix(PEFT_PREFIX).partition(".lora_")
        if not sep:
            continue  # a bias or saved module: vLLM reads it, no shape to hold against
        target = f"{module}.weight"
        if target not in weights:
            raise AdapterError(
                f"{adapter} changes {module}, which {base.name} ({architecture}) does not "
                "have: it was made for another architecture"
            )
        out_size, in_size = weights[target][0], weights[target][-1]
        if part.startswith("A") and shape[-1:] != [in_size]:
            raise AdapterError(
                f"{adapter}: {module}'s lora_A is {shape}, but {base.name}'s {module} takes "
                f"{in_size} inputs ({architecture} {weights[target]}): made for another size"
            )
        if part.startswith("B") and shape[:1] != [out_size]:
            raise AdapterError(
                f"{adapter}: {module}'s lora_B is {shape}, but {base.name}'s {module} gives "
                f"{out_size} outputs ({architecture} {weights[target]}): made for another size"
            )


def engine_rank(rank: int) -> int:
    """The least rank vLLM's LoRA engine takes that holds ``rank``."""
    return next(r for r in ENGINE_RANKS if r >= rank)
