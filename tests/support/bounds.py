"""Runs a script in a child process bounded in time and memory (the hostile inputs' tests)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from core.config import REPO_ROOT


def run_bounded(script: str, seconds: float) -> subprocess.CompletedProcess:
    """Runs Python code in a child that is killed past ``seconds`` (a hang fails the test
    instead of holding it)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=seconds,
    )
