"""What the tests split from tests/unit/test_containment.py by kind share (docs/tests.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from core.config import REPO_ROOT, data_paths
from core.jobs.folder import JobFolder
from tests.support.jobs import finished_job

HOSTILE = REPO_ROOT / "tests" / "hostile"


BAD_LINES = {
    "deep_nesting.jsonl": "line 2: error: the JSON is nested too deeply to read",
    "lone_surrogate.jsonl": "line 2: error: the line holds an unpaired UTF-16 surrogate",
}


BROKEN_FOLDERS = {
    "garbage": ("job.json", b"\x00\xffnot json at all"),
    "empty": ("status.json", b""),
    "wrong types": ("job.json", b'{"job_id": 7, "created_at": [], "engine": "big"}'),
    "bad state": ("status.json", b'{"state": "exploded"}'),
}


@pytest.fixture
def good_and_broken(studio_home: Path) -> tuple[JobFolder, list[JobFolder]]:
    good = finished_job(studio_home, {"a": "yes", "b": None})
    broken = []
    for number, (file, content) in enumerate(BROKEN_FOLDERS.values()):
        job = finished_job(studio_home / f"b{number}", {"x": "fine"})
        target = data_paths().jobs / f"job_broken_{number}"
        shutil.move(job.path, target)
        (target / file).write_bytes(content)
        broken.append(JobFolder(target))
    return good, broken
