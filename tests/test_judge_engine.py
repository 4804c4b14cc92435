"""A real judge job on the built-in model: ``core judge`` starts it, the real worker runs it,
structured output holds every verdict to the schema, and the verdicts join back as a check."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest

from core.config import data_paths
from core.jobs.folder import JobFolder
from core.qa.judge import DEFAULT_TEMPLATE, VERDICT_SCHEMA
from core.store import checks, judged
from core.store.db import Store
from tests.conftest import run_cli
from tests.test_results_pages import job_in_home

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


def test_core_judge_runs_a_judge_job_whose_verdicts_join_back_as_a_check(
    warm_home, tmp_path, default_model
):
    graded = job_in_home(warm_home, ROWS)
    template = tmp_path / "judge.j2"
    template.write_text(DEFAULT_TEMPLATE, encoding="utf-8")
    done = run_cli(
        "judge", graded, "--template", str(template), "--model", str(default_model),
        "--max-tokens", "80", "--name", "judge on the engine",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    assert job_id.startswith("job_") and "\n" not in job_id  # the id alone, for pipelines
    job = JobFolder(data_paths().jobs / job_id)
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
