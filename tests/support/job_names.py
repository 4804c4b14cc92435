"""What the tests split from tests/unit/test_job_names.py by kind share (docs/tests.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import data_paths
from core.jobs.folder import JobFolder
from core.jobs.submit import Submission, submit
from core.schemas import EngineConfig
from tests.support.jobs import request_line

pytestmark = pytest.mark.usefixtures("studio_home")


def batch(path: Path, version: str | None = None, lines: int = 3) -> Path:
    metadata = {"metadata": {"task": "t", "prompt_version": version}} if version else {}
    rows = [request_line(f"t:{i}", f"prompt {i}", **metadata) for i in range(lines)]
    path.write_text("".join(row + "\n" for row in rows), encoding="utf-8")
    return path


def submitted(file: Path, model: Path, **options: object) -> JobFolder:
    submission = Submission(engine=EngineConfig(model=str(model)), **options)
    return submit(file, submission, data_paths().jobs).job
