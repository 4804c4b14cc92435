"""What makes two requests the same: the key an answer is reused under."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from core.check.digests import (
    DIGEST_BYTES,
    RequestDigests,
    deterministic,
    digest,
    request_digest,
)
from core.check.engine_requests import EngineRequest, PooledRequest
from core.devices import engine_environment, resolve_dtype, runs_on_gpu
from core.model_folders import weight_manifest
from core.run.structured import STRUCTURED_OUTPUTS
from core.schemas import EngineConfig, JobSpec

if TYPE_CHECKING:
    import numpy as np

KEY_BYTES = DIGEST_BYTES
_encode = msgspec.json.Encoder(order="sorted").encode


def model_folder(spec: JobSpec, request: EngineRequest) -> str:
    """The model folder a request of this job runs on: its body's ``model`` as the job maps
    it, else the job's model (its embedding model for vectors and scores)."""
    return folder_of(spec, request.model or "", isinstance(request, PooledRequest))


def folder_of(spec: JobSpec, model: str, pooled: bool) -> str:
    """The folder of :func:`model_folder`, by a body's ``model`` and whether the request
    makes vectors or scores."""
    return spec.model_map.get(model) or (spec.embedding_folder if pooled else spec.engine.model)


def model_identity(folder: str | Path, engine: EngineConfig, on_gpu: bool) -> str:
    """What decides the answers of one engine besides the requests, hashed: the model
    folder's content (every file loading reads, subfolders and code included:
    :func:`core.model_folders.weight_manifest`, cached beside the models by size and
    modification time), the engine's software and device (vLLM, torch and transformers
    versions; each GPU's model, or the CPU's kernel family:
    :func:`core.devices.engine_environment`) and the settings that change outputs (the
    dtype it resolves to, quantization, context length, tensor parallel size, the engine's
    seed and the structured-output backend). The worker, ``core check`` and the pages all
    key answers by it; docs/reuse.md lists the same."""
    settings = {
        "manifest": weight_manifest(Path(folder)) or str(folder),
        "engine": engine_environment(on_gpu),
        "dtype": resolve_dtype(engine.dtype, on_gpu),
        "device": "gpu" if on_gpu else "cpu",
        "quantization": engine.quantization,
        "max_model_len": engine.max_model_len,
        "tensor_parallel_size": engine.tensor_parallel_size,
        "seed": engine.seed,
        "structured_outputs": STRUCTURED_OUTPUTS,
    }
    return digest(_encode(settings)).hex()


def adapter_identity(base_identity: str, folder: str | Path) -> str:
    """The identity of a LoRA adapter's answers: its base engine's identity
    (:func:`model_identity`) and the adapter folder's content (its config and weights:
    an adapter changed on disk is a new model)."""
    settings = {"base": base_identity, "adapter": weight_manifest(Path(folder)) or str(folder)}
    return digest(_encode(settings)).hex()


def request_key(request: EngineRequest, identity: str) -> bytes:
    """The key of ``request``'s answer on the engine ``identity`` names: the request's
    digest (:func:`core.check.digests.request_digest`) XOR the identity's, so that the
    check's own pass keeps digests and any engine settings key them after, for a file of
    millions of lines at once (:func:`keys_of`). Two (engine, request) pairs share a key
    only where two digests differ by the two identities' difference: as unlikely as two
    digests alike (a birthday search over 128 bits), as for a hash of both."""
    mask = int.from_bytes(_mask(identity))
    return (int.from_bytes(request_digest(request)) ^ mask).to_bytes(KEY_BYTES)


def keys_of(digests: bytes | bytearray, identity: str) -> np.ndarray:
    """The keys (:func:`request_key`) of the requests of these digests (16 bytes each) on
    the engine ``identity``: one 16-byte item each, in their order."""
    import numpy as np  # here: a check whose forecast finds no earlier job never loads it

    halves = np.frombuffer(digests, dtype=np.uint64).reshape(-1, 2)
    return (halves ^ np.frombuffer(_mask(identity), dtype=np.uint64)).view(f"V{KEY_BYTES}")[:, 0]


@cache
def _mask(identity: str) -> bytes:
    return digest(identity.encode())


class RequestKeys:
    """The keys of one job's deterministic requests, each model's identity read once: the
    one way to a key, which the worker (the job's ``job.json``), ``core check``, Upload &
    check and Run (the spec :func:`core.jobs.submit.planned_spec` says the job would run
    with) all take, so a forecast counts the keys the run looks up.

    Args:
        spec: the job; with ``spec.reuse`` off no request has a key. Its engines run on a
            GPU or not as :func:`core.devices.runs_on_gpu` says (the numbers differ).
    """

    def __init__(self, spec: JobSpec) -> None:
        self.spec, self.on_gpu = spec, runs_on_gpu(spec.ray)
        self._identities: dict[str, str] = {}

    def identity(self, folder: str) -> str:
        """The identity of the answers made on ``folder``; an adapter's is its base's with
        the adapter's own files (:func:`adapter_identity`)."""
        if folder not in self._identities:
            base = self.spec.engine_folder(folder)
            engine = self.spec.on_model(base).engine
            identity = model_identity(base, engine, self.on_gpu)
            if base != folder:
                identity = adapter_identity(identity, folder)
            self._identities[folder] = identity
        return self._identities[folder]

    def of(self, request: EngineRequest) -> bytes | None:
        """The request's key; None where its answer is never reused."""
        if not self.spec.reuse or not deterministic(request):
            return None
        return request_key(request, self.identity(model_folder(self.spec, request)))

    def of_digests(self, digests: RequestDigests) -> Iterator[tuple[str, np.ndarray]]:
        """Each model folder, and the keys (:func:`keys_of`) of the lines the check kept the
        digests of that run on it (none with ``spec.reuse`` off): the keys :meth:`of` gives
        those lines' requests."""
        if not self.spec.reuse:
            return
        for (model, pooled), group in digests.groups.items():
            folder = folder_of(self.spec, model, pooled)
            yield folder, keys_of(group, self.identity(folder))

    def distinct(self, digests: RequestDigests) -> tuple[int, int]:
        """How many of these lines have a key (:meth:`of_digests`), and how many distinct
        keys they make: what :func:`core.reuse.forecast.first_of_each` counts, without
        numpy (whose import costs more than this on a file of a million lines). Keys first
        compared by their first 8 bytes; only where two of those match, whole."""
        if not self.spec.reuse:
            return 0, 0
        by_mask: dict[bytes, list[bytearray]] = {}  # digests by the identity keying them
        for (model, pooled), group in digests.groups.items():
            mask = _mask(self.identity(folder_of(self.spec, model, pooled)))
            by_mask.setdefault(mask, []).append(group)
        count = len(digests)
        firsts: set[int] = set()
        for mask, groups in by_mask.items():
            high = int.from_bytes(mask[:8], sys.byteorder)  # a key is its digest XOR the mask
            for group in groups:
                firsts.update([half ^ high for half in memoryview(group).cast("Q")[::2]])
        if len(firsts) == count:
            return count, count
        keys: set[bytes] = set()
        for mask, groups in by_mask.items():
            for group in groups:
                size = len(group)
                joined = int.from_bytes(group) ^ int.from_bytes(mask * (size // KEY_BYTES))
                whole = joined.to_bytes(size)
                keys.update([whole[at : at + KEY_BYTES] for at in range(0, size, KEY_BYTES)])
        return count, len(keys)

    def settings(self) -> str:
        """The settings its keys assume, as a person reads them (a forecast says them)."""
        engine = self.spec.engine
        dtype = resolve_dtype(engine.dtype, self.on_gpu)
        said = [f"dtype {dtype}" + (" (auto)" if engine.dtype == "auto" else "")]
        length = engine.max_model_len
        said.append(f"max model length {length:,}" if length else "the model's own length")
        if engine.quantization:
            said.append(f"{engine.quantization} quantization")
        if engine.tensor_parallel_size > 1:
            said.append(f"tensor parallel size {engine.tensor_parallel_size}")
        said.append(f"engine seed {engine.seed}")
        said.append("on a GPU" if self.on_gpu else "on the CPU")
        return ", ".join(said)
