"""What makes two requests the same: the key an answer is reused under."""

from __future__ import annotations

import dataclasses
import hashlib
from functools import cache
from pathlib import Path

import msgspec

from core.check.engine_requests import EngineRequest, GeneratedRequest, PooledRequest
from core.devices import engine_environment, runs_on_gpu
from core.model_folders import weight_manifest
from core.run.engine import resolve_dtype
from core.run.structured import STRUCTURED_OUTPUTS
from core.schemas import EngineConfig, JobSpec

KEY_BYTES = 16  # BLAKE2b-128: a collision among a billion answers has odds of 1e-21

# Fields of a request that say nothing about its answer: its id, the name its body asked
# for (the folder it resolves to is in the engine's identity), and the check's notes.
_NOT_IN_KEY = frozenset({"custom_id", "model", "warnings", "defaulted"})
_encode = msgspec.json.Encoder(order="sorted").encode


def deterministic(request: EngineRequest) -> bool:
    """Whether the engine gives this request the same answer each time: vectors and scores
    always; generated text at temperature 0 (greedy) or with a ``seed``. A request sampled
    without a seed is a new sample each time, as its author meant: never reused."""
    if not isinstance(request, GeneratedRequest):
        return True
    sampling = request.sampling
    return sampling.get("seed") is not None or sampling.get("temperature") == 0


def model_folder(spec: JobSpec, request: EngineRequest) -> str:
    """The model folder a request of this job runs on: its body's ``model`` as the job maps
    it, else the job's model (its embedding model for vectors and scores)."""
    default = spec.embedding_folder if isinstance(request, PooledRequest) else spec.engine.model
    return spec.model_map.get(request.model or "") or default


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
    return _digest(_encode(settings)).hex()


@cache
def _key_fields(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(kind) if f.name not in _NOT_IN_KEY)


def request_key(request: EngineRequest, identity: str) -> bytes:
    """The key of ``request``'s answer on the engine ``identity`` names: a hash of the
    request with its defaults applied (its kind's fields, keys sorted at every depth)."""
    fields = {name: getattr(request, name) for name in _key_fields(type(request))}
    return _digest(identity.encode() + b"\n" + _encode(fields))


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=KEY_BYTES).digest()


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
        if folder not in self._identities:
            engine = self.spec.on_model(folder).engine
            self._identities[folder] = model_identity(folder, engine, self.on_gpu)
        return self._identities[folder]

    def of(self, request: EngineRequest) -> bytes | None:
        """The request's key; None where its answer is never reused."""
        if not self.spec.reuse or not deterministic(request):
            return None
        return request_key(request, self.identity(model_folder(self.spec, request)))

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
