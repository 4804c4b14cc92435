"""Each GPU's memory and load, read with NVML (nvidia-ml-py), as Monitor charts them.

It imports nothing of the studio and nothing but ``pynvml``, and that only when asked: the
worker's sampler (core/run/monitoring.py) reads GPUs through it, and so does
bench/gpu_readings.py on a GPU machine that has torch and nvidia-ml-py and nothing else.
"""

from __future__ import annotations

from typing import Any


class GpuReader:
    """Reads every GPU NVML finds; none without a driver or the library."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._nvml = pynvml
        except Exception:  # no driver or no library: no GPU readings
            self._handles = []

    @property
    def count(self) -> int:
        return len(self._handles)

    def read(self) -> list[dict[str, Any]]:
        """Per GPU: ``{"index", "memory_used_mib", "memory_total_mib", "utilization"}``
        (NVML's used memory in MiB of 2**20 bytes, and its busy % over its last period)."""
        gpus = []
        for index, handle in enumerate(self._handles):
            info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
            gpus.append(
                {
                    "index": index,
                    "memory_used_mib": info.used / 2**20,
                    "memory_total_mib": info.total / 2**20,
                    "utilization": util.gpu,
                }
            )
        return gpus
