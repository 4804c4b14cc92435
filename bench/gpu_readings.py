"""GPU memory and load as Monitor reads them (NVML, core/nvml.py) beside ``nvidia-smi``,
while torch allocates and frees memory and keeps the GPU busy (issue 41 item 4).

Usage::

    python bench/gpu_readings.py [--sizes 1,4,8] [--device 0]

It imports only torch, pynvml (nvidia-ml-py) and core/nvml.py, so it runs on a GPU machine
that has nothing else of the studio's installed. For each size it allocates a tensor of
that many GiB, reads both sources, keeps the GPU busy with matrix products and reads them
again, then frees it (``torch.cuda.empty_cache()``) and reads once more. Each row: torch's
own allocated and reserved memory, NVML's and nvidia-smi's used MiB and their difference,
and both utilisation readings. Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.nvml import GpuReader

SETTLE_SECONDS = 0.5  # NVML's utilisation counts over its last sample period (~1/6-1 s)
BUSY_SECONDS = 2.0


def smi(device: int) -> tuple[float, float] | None:
    """``(memory.used MiB, utilization.gpu %)`` from nvidia-smi, None without it."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["--query-gpu=memory.used,utilization.gpu", "--format=csv,noheader,nounits"]
    out = subprocess.run(
        ["nvidia-smi", *query, "-i", str(device)], capture_output=True, text=True, check=False
    )
    try:
        used, util = (float(x) for x in out.stdout.strip().split(","))
    except ValueError:
        return None
    return used, util


def row(step: str, torch, reader: GpuReader, device: int) -> str:
    gpu = reader.read()[device]
    theirs = smi(device)
    allocated = torch.cuda.memory_allocated(device) / 2**30
    reserved = torch.cuda.memory_reserved(device) / 2**30
    smi_used, smi_util = theirs if theirs is not None else (float("nan"), float("nan"))
    return (
        f"| {step:<18} | {allocated:9.2f} | {reserved:8.2f} | {gpu['memory_used_mib']:10,.0f} "
        f"| {smi_used:10,.0f} | {gpu['memory_used_mib'] - smi_used:+7,.0f} "
        f"| {gpu['utilization']:5.0f} | {smi_util:5.0f} |"
    )


def busy(torch, device: int, seconds: float) -> None:
    """Queues matrix products for about ``seconds`` (the readings come while they run)."""
    a = torch.randn(8192, 8192, device=f"cuda:{device}", dtype=torch.float16)
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    a @ a
    torch.cuda.synchronize(device)
    each = max(time.perf_counter() - start, 1e-4)
    for _ in range(int(seconds / each)):
        a @ a  # asynchronous: the GPU works through them while the readings are taken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4,8", help="GiB to allocate, comma-separated")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()
    reader = GpuReader()
    if reader.count == 0:
        print("No GPU found: NVML (nvidia-ml-py) sees no device here, nothing to compare.")
        return 0
    try:
        import torch
    except ImportError:
        print("NVML sees a GPU, but torch is not installed: nothing allocates memory.")
        return 0
    if not torch.cuda.is_available():
        print("No GPU found by torch (torch.cuda.is_available() is False).")
        return 0
    device = args.device
    print(f"GPU {device}: {torch.cuda.get_device_name(device)}; torch {torch.__version__}")
    print(f"nvidia-smi: {shutil.which('nvidia-smi') or 'not found'}")
    print()
    print(
        "| step               | torch GiB | reserved |  NVML MiB  |  smi MiB   |  diff   "
        "| NVML% | smi % |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    torch.cuda.init()
    print(row("before", torch, reader, device))
    for size in (float(s) for s in args.sizes.split(",")):
        free, _ = torch.cuda.mem_get_info(device)
        if size * 2**30 > free - 2**30:
            print(f"| {size:g} GiB skipped: {free / 2**30:.1f} GiB free |")
            continue
        block = torch.ones(int(size * 2**30), dtype=torch.uint8, device=f"cuda:{device}")
        torch.cuda.synchronize(device)
        time.sleep(SETTLE_SECONDS)
        print(row(f"{size:g} GiB held", torch, reader, device))
        busy(torch, device, BUSY_SECONDS)
        time.sleep(SETTLE_SECONDS)
        print(row(f"{size:g} GiB, busy", torch, reader, device))
        torch.cuda.synchronize(device)
        del block
        torch.cuda.empty_cache()
        time.sleep(SETTLE_SECONDS)
        print(row(f"{size:g} GiB freed", torch, reader, device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
