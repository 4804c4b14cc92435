"""The CLI as a user runs it, with the test's environment."""

from __future__ import annotations

import os
import subprocess
import sys

from core.config import REPO_ROOT


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Runs ``python -m core ARGS`` as a user would, with this test's environment."""
    return subprocess.run(
        [sys.executable, "-m", "core", *args],
        cwd=REPO_ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
