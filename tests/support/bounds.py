"""Runs a script in a child process bounded in time and memory (the hostile inputs' tests)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from core.config import REPO_ROOT
from core.plan import bounded_render

# A render's time bound for the tests of templates too slow on every row: each waits the
# bound on three rows, and at the product's 2 s those few tests held a worker for 18 s.
SHORT_RENDER_SECONDS = 0.25


@pytest.fixture
def short_render_bound(monkeypatch: pytest.MonkeyPatch) -> float:
    """The render time bound, shortened for this test (templates that never finish)."""
    monkeypatch.setattr(bounded_render, "MAX_RENDER_SECONDS", SHORT_RENDER_SECONDS)
    return SHORT_RENDER_SECONDS


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
