"""What this machine has to run an engine on: its GPUs and its CPU's features."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from core.schemas import EngineConfig, RaySettings


def gpu_count() -> int:
    """Number of NVIDIA GPUs NVML sees (0 without a driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: no GPU
        return 0


def runs_on_gpu(ray: RaySettings | None) -> bool:
    """Whether a job's engines run on a GPU: its Ray replicas' GPUs where it runs on a
    cluster, else this machine's. The worker, the check's forecast and the pages ask this
    one question, so a key forecast is the key the run uses (:mod:`core.reuse.keys`)."""
    return bool(ray.gpus_per_replica) if ray is not None else gpu_count() > 0


def gpu_problems(config: EngineConfig, gpus: int | None = None) -> list[str]:
    """Engine settings this machine cannot honour, each as a message; empty when fine.

    The settings' own bounds (at least 1, a fraction in (0, 1], a known dtype) are
    :class:`core.schemas.EngineConfig`'s field constraints; this is what depends on the
    machine.
    """
    gpus = gpu_count() if gpus is None else gpus
    tp = config.tensor_parallel_size
    if gpus and tp > gpus:
        return [f"tensor parallel size {tp} needs that many GPUs; this machine has {gpus}"]
    if not gpus and tp > 1:
        return ["tensor parallelism needs GPUs; this machine has none"]
    return []


def ray_installed() -> bool:
    """Whether Ray (requirements-ray.txt) can be imported here."""
    return importlib.util.find_spec("ray") is not None


def cpu_has_bf16() -> bool:
    """True when the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags
