"""What the tests split from tests/unit/test_judge_calibration.py by kind share (docs/tests.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import data_paths
from core.jobs.folder import JobFolder
from core.qa import calibration as cal
from core.qa import judge as J
from tests.support.judge import answer_judge

pytestmark = pytest.mark.usefixtures("studio_home")


def verdict(v: str, score: int) -> str:
    return json.dumps({"verdict": v, "score": score, "reason": "r"})


RIGHT = {i.custom_id: verdict(i.verdict, 5 if i.verdict == "pass" else 1) for i in cal.ITEMS}


SELF_CONTRADICTING = {i.custom_id: verdict("pass", 1) for i in cal.ITEMS}  # as SmolLM2 did


def calibrate(model: Path, answers: dict[str, str], template: str = J.DEFAULT_TEMPLATE,
              max_tokens: int = 96) -> cal.Calibration:  # fmt: skip
    settings = J.JudgeSettings(str(model), max_tokens)
    started = J.start_calibration(template, settings)
    job = JobFolder(data_paths().jobs / started.job_id)
    assert J.calibration(template, settings).state == "running"
    answer_judge(job, answers)
    return J.calibration(template, settings)
