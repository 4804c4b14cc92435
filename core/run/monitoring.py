"""Resource and progress samples of a running job, and the rates read from them.

The worker appends one sample every heartbeat to ``metrics.jsonl`` in the job folder:
progress counters, its own RSS and CPU use (psutil), and per-GPU memory and utilisation
read with NVML (nvidia-ml-py) where there is a GPU. The samples stay with the job, so the
monitor can chart a run after it ended.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil


class ResourceSampler:
    """Reads this process's CPU/RSS and, when NVML finds GPUs, each GPU's memory and load."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._process.cpu_percent(None)  # the first reading only starts the interval
        self._nvml = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
            self._nvml = pynvml
        except Exception:  # no driver or no library: CPU readings only
            self._handles = []

    def sample(self) -> dict[str, Any]:
        memory = self._process.memory_info()
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
        return {
            "rss_mib": memory.rss / 2**20,
            "cpu_percent": self._process.cpu_percent(None),
            "gpus": gpus,
        }


def append_sample(path: Path, sample: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(sample) + "\n")


def read_samples(path: Path) -> list[dict[str, Any]]:
    """The samples written so far (a torn last line is skipped)."""
    if not path.exists():
        return []
    samples = []
    for raw in path.read_bytes().splitlines(keepends=True):
        if raw.endswith(b"\n"):
            samples.append(json.loads(raw))
    return samples


@dataclass
class Rates:
    """Throughput now (over the last ``window`` seconds) and on average, and the ETA."""

    requests_per_s: float = 0.0
    tokens_per_s: float = 0.0
    average_requests_per_s: float = 0.0
    average_tokens_per_s: float = 0.0
    eta_seconds: float | None = None


def rates(samples: list[dict[str, Any]], total: int, window: float = 20.0) -> Rates:
    """Rates from progress samples ``{"t", "done", "completion_tokens"}``.

    Averages count from the first sample with a result, so model loading does not drag
    them down; the ETA uses the recent rate, falling back to the average.
    """
    running = [s for s in samples if s.get("done") is not None]
    if len(running) < 2:
        return Rates()
    last = running[-1]
    recent = [s for s in running if s["t"] >= last["t"] - window]
    first = recent[0] if len(recent) > 1 else running[-2]
    span = max(last["t"] - first["t"], 1e-9)
    now = Rates(
        requests_per_s=(last["done"] - first["done"]) / span,
        tokens_per_s=(last["completion_tokens"] - first["completion_tokens"]) / span,
    )
    started = next((s for s in running if s["done"] > running[0]["done"]), None)
    if started is not None:
        base = running[running.index(started) - 1]
        elapsed = max(last["t"] - base["t"], 1e-9)
        now.average_requests_per_s = (last["done"] - base["done"]) / elapsed
        now.average_tokens_per_s = (last["completion_tokens"] - base["completion_tokens"]) / elapsed
    speed = now.requests_per_s or now.average_requests_per_s
    if speed > 0:
        now.eta_seconds = max(total - last["done"], 0) / speed
    return now


def progress_sample(done: int, completion_tokens: int, resources: dict[str, Any]) -> dict:
    return {"t": time.time(), "done": done, "completion_tokens": completion_tokens, **resources}
