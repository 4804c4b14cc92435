"""What a benchmark says of the machine it ran on: its figures hold for that CPU only."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name and this machine's core count, e.g. ``AMD EPYC, 2 cores``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return "unknown"
