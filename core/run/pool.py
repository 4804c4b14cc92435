"""The engines a worker keeps loaded between jobs, least recently used first out.

A job on a loaded model gets its engine at once. A job on another model loads it beside
the loaded ones when memory allows, else the least recently used engines are unloaded
first. Memory is judged from what the machine reports: available RAM (psutil) on a CPU,
free GPU memory (NVML) on a GPU, against what this model took when it was last loaded in
this process (its RSS or GPU memory growth), or before its first load its weights and KV
cache.

vLLM 0.32 cannot hold two engines in one process: in-process on CPU, a second ``LLM``
re-initialises vLLM's process-wide parallel state, and the first one then fails at its next
step ("pipeline model parallel group is not initialized", measured 2026-12-02). So at most
:data:`MAX_ENGINES` engines are kept; models take turns.

With V1 multiprocessing on (``VLLM_ENABLE_V1_MULTIPROCESSING=1``: each ``LLM``'s engine core
in a child process of its own), two ``LLM`` objects of two model folders do live in one
worker: the first still runs after the second loaded and gives the same answers (tried
2026-12-02 on the CPU build; it needs the ``if __name__ == "__main__"`` guard, which
``core.run.worker`` has). It is not turned on, because (1) this pool judges memory by this
process's RSS and its growth at a load, and an engine core's memory would then be in its
child process (it would need the children's RSS summed); (2) whether one engine's
throughput drops with its core in a child process (a message queue between the step loop
and the model, on 2 cores) was not measured: the machine was loaded; (3) a worker killed
with -9 must not leave engine-core children holding memory. Measure (2) before raising
:data:`MAX_ENGINES`, and do (1) and (3) with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from core.schemas import EngineConfig

log = logging.getLogger(__name__)

MAX_ENGINES = 1  # vLLM's parallel state is per process (see above)
RESERVE_BYTES = 1 << 30  # left to the rest of the machine when judging a new load
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


class Closable(Protocol):
    load_seconds: float

    def close(self) -> None: ...


@dataclass
class Held:
    """One loaded engine and what it costs."""

    engine: Closable
    memory_bytes: int
    loaded_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.time)


def _gpu_memory() -> tuple[int, int, int] | None:
    """``(used, free, total)`` bytes over every GPU (NVML), or None without a GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        infos = [
            pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i))
            for i in range(count)
        ]
    except Exception:  # no driver or no library
        return None
    if not infos:
        return None
    return sum(i.used for i in infos), sum(i.free for i in infos), sum(i.total for i in infos)


def memory_in_use() -> int:
    """What this process holds: GPU memory in use where there is a GPU, else its RSS."""
    gpu = _gpu_memory()
    return gpu[0] if gpu is not None else psutil.Process().memory_info().rss


def memory_available() -> int:
    """Free GPU memory where there is a GPU, else the RAM the machine can still give."""
    gpu = _gpu_memory()
    return gpu[1] if gpu is not None else psutil.virtual_memory().available


def first_load_bytes(config: EngineConfig) -> int:
    """What a model never loaded in this process will take: on a GPU its share of the GPU
    (vLLM takes ``gpu_memory_utilization`` of it whatever the model), on a CPU its weight
    files and its fixed KV cache."""
    gpu = _gpu_memory()
    if gpu is not None:
        return int(config.gpu_memory_utilization * gpu[2])
    folder = Path(config.model)
    weights = sum(
        f.stat().st_size for f in folder.glob("*") if f.suffix in WEIGHT_SUFFIXES and f.is_file()
    )
    return weights + int(config.cpu_kv_cache_gib * (1 << 30))


class EnginePool:
    """Loaded engines by their config, least recently used first."""

    def __init__(
        self,
        load: Callable[[EngineConfig], Closable],
        in_use: Callable[[], int] = memory_in_use,
        available: Callable[[], int] = memory_available,
        max_engines: int = MAX_ENGINES,
    ) -> None:
        self._load = load
        self._in_use = in_use
        self._available = available
        self.max_engines = max_engines
        self.held: dict[EngineConfig, Held] = {}  # insertion order = least recently used first
        self.measured: dict[str, int] = {}  # model folder -> bytes its last load took
        self.on_change: Callable[[], None] | None = None  # told after a load or unload
        self.baseline: int | None = None  # memory in use before this process's first load

    def get(self, config: EngineConfig) -> tuple[Closable, float]:
        """The engine for ``config`` and the seconds spent loading it (0 when loaded)."""
        if config in self.held:
            held = self.held.pop(config)
            held.last_used = time.time()
            self.held[config] = held  # now the most recently used
            return held.engine, 0.0
        for other in [c for c in self.held if c.model == config.model]:
            self.unload(other)  # the same model with other settings: one copy at a time
        need = self.measured.get(config.model) or first_load_bytes(config)
        while self.held and (
            len(self.held) >= self.max_engines or self._available() - RESERVE_BYTES < need
        ):
            self.unload(next(iter(self.held)))
        before = self._in_use()
        if self.baseline is None:
            self.baseline = before
        engine = self._load(config)
        after = self._in_use()
        took = max(after - before, 0)
        if not self.held:
            # Alone, it holds all this process took beyond what it held before its first
            # load: the growth alone under-counts a model loaded where another's memory was
            # freed (the allocator reuses it; measured: 5 MiB after a swap for 90 MB of
            # weights).
            took = max(took, after - self.baseline)
        self.measured[config.model] = took
        self.held[config] = Held(engine, took)
        self._changed()
        return engine, engine.load_seconds

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def unload(self, config: EngineConfig) -> None:
        held = self.held.pop(config, None)
        if held is not None:
            log.info("unloading %s", config.model_name)
            held.engine.close()
            self._changed()

    def unload_model(self, name: str) -> bool:
        """Unloads every engine of the model called ``name`` (its folder or folder name);
        False when none is loaded."""
        found = [c for c in self.held if name in (c.model, c.model_name)]
        for config in found:
            self.unload(config)
        return bool(found)

    def discard(self, engine: object) -> None:
        """Forgets an engine that failed (it may be broken): the next job loads afresh."""
        for config, held in list(self.held.items()):
            if held.engine is engine:
                self.held.pop(config)
                self._changed()
                try:
                    engine.close()  # type: ignore[attr-defined]
                except Exception:  # already broken; its memory goes with the process at worst
                    log.exception("closing a failed engine")

    def close(self) -> None:
        for config in list(self.held):
            self.unload(config)


def _load_engine(config: EngineConfig) -> Closable:
    from core.run.engine import Engine

    return Engine(config)


POOL = EnginePool(_load_engine)  # this worker process's engines
