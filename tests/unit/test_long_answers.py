"""One long answer must not refuse a whole judge (issue 31, item 7): answers beyond the
judge model's context are "not graded", each with the reason, and the others are judged."""

from __future__ import annotations

import pandas as pd
import pytest

from core.config import data_paths
from core.qa import judge as J
from core.store import checks, judged
from tests.support.judge import answer_judge, open_store, verdict
from tests.support.pages import job_in_home

pytestmark = pytest.mark.usefixtures("studio_home", "calibrated_judges")

LONG = {"l1", "l2", "l3"}  # answers far beyond SmolLM2's 8,192-token context


def graded_job(studio_home) -> str:
    rows = [{"custom_id": f"s{i:02}", "answer": f"short answer {i}"} for i in range(10)]
    rows += [{"custom_id": cid, "answer": "word " * 40_000} for cid in sorted(LONG)]
    return job_in_home(studio_home, rows)


def test_answers_beyond_the_judges_context_are_not_graded_with_the_reason(
    studio_home, default_model, no_worker
):
    graded = graded_job(studio_home)
    db = open_store()
    started = J.start_judge(db, graded, J.DEFAULT_TEMPLATE, J.JudgeSettings(str(default_model)))
    job = started.job
    assert len(job.read_refusals()) == 3
    answer_judge(job, {f"s{i:02}": verdict("pass") for i in range(10)})  # the rest are refused
    db.ingest_all(data_paths().jobs)
    name = job.read_spec().judge.check
    got = judged.verdicts(db, [graded], name).set_index("custom_id")
    rates = checks.pass_rates(db, [graded], "all").set_index("rule")
    db.close()
    assert rates.loc[name, ["passed", "failed", "not_graded"]].tolist() == [10, 0, 3]
    for cid in LONG:
        assert pd.isna(got.loc[cid, "passed"])
        assert "the model's context is 8,192" in got.loc[cid, "reason"], got.loc[cid, "reason"]


def test_core_judge_starts_and_says_how_many_answers_it_cannot_grade(
    studio_home, default_model, tmp_path, capsys, monkeypatch
):
    """In process, with no worker started (it would load the model)."""
    from types import SimpleNamespace

    from core.cli.main import main

    started: list[str] = []
    monkeypatch.setattr(
        "core.jobs.submit.start_worker",
        lambda job, **kw: started.append(job.job_id) or SimpleNamespace(pid=0),
    )
    graded = graded_job(studio_home)
    template = tmp_path / "judge.j2"
    template.write_text(J.DEFAULT_TEMPLATE, encoding="utf-8")
    code = main(["judge", graded, "--template", str(template), "--model", str(default_model)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "3 answer(s) are more than the judge's model can take" in err
    assert "--skip-invalid" not in err and len(started) == 1  # advice core judge refuses
