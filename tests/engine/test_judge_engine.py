"""A real judge on the built-in model: ``core judge`` calibrates it and refuses it (it cannot
judge); a judge job started in the library past its calibration runs on the real worker,
structured output holds every verdict to the schema, and the verdicts join back as a check."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest

from core.config import data_paths
from core.jobs.folder import JobFolder, list_jobs
from core.qa.judge import DEFAULT_TEMPLATE, VERDICT_SCHEMA, JudgeSettings, start_judge
from core.store import checks, judged
from core.store.db import Store
from tests.support.cli import run_cli
from tests.support.pages import job_in_home

pytestmark = pytest.mark.engine

ROWS = [
    {"custom_id": "capital", "prompt": "What is the capital of France?", "answer": "Paris."},
    {"custom_id": "sum", "prompt": "What is 2 + 2?", "answer": "5"},
    {"custom_id": "colour", "prompt": "What colour is the sky?", "answer": "Blue."},
    {"custom_id": "days", "prompt": "How many days are in a week?", "answer": "Seven."},
    {"custom_id": "fruit", "prompt": "Name a fruit.", "answer": "A hammer."},
    {"custom_id": "greet", "prompt": "Say hello.", "answer": "Hello!"},
]


def wait_final(job: JobFolder, timeout: float = 400):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = job.read_status()
        if status.is_final or status.interrupted:
            return status
        time.sleep(0.5)
    raise AssertionError(f"{job.job_id} did not finish: {job.read_status()}")


def test_core_judge_calibrates_the_built_in_model_and_refuses_it(
    warm_home, tmp_path, default_model
):
    """Issue 38: all 40 verdicts of SmolLM2-135M contradicted their own score; it is not
    offered as a judge, and the refusal says what it did and which model to choose."""
    graded = job_in_home(warm_home, ROWS)
    template = tmp_path / "judge.j2"
    template.write_text(DEFAULT_TEMPLATE, encoding="utf-8")
    args = ("judge", graded, "--template", str(template), "--model", str(default_model),
            "--max-tokens", "80")  # fmt: skip
    done = run_cli(*args)
    assert done.returncode == 2, done.stderr
    assert "calibrating the judge: SmolLM2-135M-Instruct grades 10 answers" in done.stderr
    assert "calibration answers (at least 8 needed)" in done.stderr, done.stderr
    assert "cannot judge" in done.stderr and "bigger instruct model" in done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    links = [job.read_spec().judge for job in list_jobs(data_paths().jobs)]
    assert not any(link and link.graded == [graded] for link in links)  # no judge job made
    again = run_cli(*args)  # kept: refused at once, not calibrated again
    assert again.returncode == 2 and "cannot judge" in again.stderr
    assert "calibrating" not in again.stderr


@pytest.mark.usefixtures("calibrated_judges")
def test_a_judge_job_runs_on_the_engine_and_its_verdicts_join_back_as_a_check(
    warm_home, default_model
):
    graded = job_in_home(warm_home, ROWS)
    db = Store(data_paths().database)
    try:
        db.ingest_all(data_paths().jobs)
        settings = JudgeSettings(str(default_model), 80, "judge on the engine")
        job = start_judge(db, graded, DEFAULT_TEMPLATE, settings).job
    finally:
        db.close()
    status = wait_final(job)
    assert status.state == "completed", (status, job.log_tail())
    assert status.succeeded == len(ROWS)

    lines = [json.loads(line) for line in job.output.read_text(encoding="utf-8").splitlines()]
    assert sorted(line["custom_id"] for line in lines) == sorted(r["custom_id"] for r in ROWS)
    for line in lines:  # structured output: every answer holds to the verdict schema
        answer = line["response"]["body"]["choices"][0]["message"]["content"]
        jsonschema.validate(json.loads(answer), VERDICT_SCHEMA)

    db = Store(data_paths().database)
    try:
        db.ingest_all(data_paths().jobs)
        name = job.read_spec().judge.check
        assert name in checks.rule_names(db, [graded])
        verdicts = judged.verdicts(db, [graded], name)
        # every answer got a verdict: a pass or a fail, or (the small model often passes an
        # answer it scores 1) a verdict that contradicts its score, counted apart
        assert len(verdicts) == len(ROWS)
        assert (verdicts["passed"].notna() | verdicts["contradicts"]).all(), verdicts
        rate = checks.pass_rates(db, [graded], "all").set_index("rule").loc[name]
        graded_all = rate["passed"] + rate["failed"] + rate["contradicted"]
        assert graded_all == len(ROWS) and rate["not_graded"] == 0
        if rate["passed"] + rate["failed"]:  # no rate when every verdict contradicted itself
            assert rate["ci_low"] - 1e-9 <= rate["pass_rate"] <= rate["ci_high"] + 1e-9
    finally:
        db.close()
