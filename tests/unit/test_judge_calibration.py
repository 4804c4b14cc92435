"""A judge is offered only once it has shown it can (issue 38, item 12): its calibration on
answers whose verdicts are known, the threshold, the kept result, and the refusals of
``start_judge``, ``core judge`` and the Checks page.

The calibration jobs here are answered by the real worker with a scripted executor in place
of the engine; tests/engine/test_judge_engine.py calibrates the built-in model for real."""

from __future__ import annotations

import json

import pytest

from core.config import data_paths
from core.jobs.folder import JobFolder
from core.qa import calibration as cal
from core.qa import judge as J
from tests.support.judge import ROWS, open_store
from tests.support.judge_calibration import RIGHT, SELF_CONTRADICTING, calibrate, verdict
from tests.support.pages import job_in_home

pytestmark = pytest.mark.usefixtures("studio_home")

ALL_PASS = {i.custom_id: verdict("pass", 5) for i in cal.ITEMS}  # agrees on the 5 passes


def test_the_known_verdicts_are_half_passes_and_every_rule_is_counted():
    assert sorted(i.verdict for i in cal.ITEMS).count("pass") == len(cal.ITEMS) // 2
    assert cal.grade(RIGHT) == (10, 0, 0)
    assert cal.grade(ALL_PASS) == (5, 0, 0)  # a judge that passes everything: half right
    assert cal.grade(SELF_CONTRADICTING) == (0, 10, 0)
    partly = {**RIGHT, "cal_sum": "not json", "cal_minus": verdict("fail", 4)}
    assert cal.grade(partly) == (8, 1, 1)  # cal_week and others still right
    assert cal.grade({}) == (0, 0, 10)  # no answer (a failed request) is no verdict


def test_a_calibration_job_asks_as_the_judge_will(model, no_worker):
    settings = J.JudgeSettings(str(model), 40)
    started = J.start_calibration("Grade: {{ answer }}", settings)
    lines = JobFolder(data_paths().jobs / started.job_id).input.read_text().splitlines()
    bodies = {json.loads(line)["custom_id"]: json.loads(line)["body"] for line in lines}
    assert sorted(bodies) == sorted(i.custom_id for i in cal.ITEMS)
    body = bodies["cal_japan"]
    assert body["messages"][0]["content"] == J.JUDGE_SYSTEM
    assert body["messages"][1]["content"] == "Grade: The capital of Japan is Berlin."
    assert body["response_format"]["json_schema"]["schema"] == J.VERDICT_SCHEMA
    assert (body["max_tokens"], body["temperature"]) == (40, 0)


def test_a_judge_that_agrees_passes_and_its_calibration_is_kept(model, no_worker):
    found = calibrate(model, RIGHT)
    assert found.passed and found.agreed == 10
    saved = list((data_paths().home / cal.FOLDER).glob("*.json"))
    assert len(saved) == 1  # kept: looked up again, it is not run again
    assert J.calibration(J.DEFAULT_TEMPLATE, J.JudgeSettings(str(model), 96)).passed
    # another template or max tokens asks otherwise: not calibrated yet
    assert J.calibration("{{ answer }}", J.JudgeSettings(str(model), 96)) is None
    assert J.calibration(J.DEFAULT_TEMPLATE, J.JudgeSettings(str(model), 64)) is None
    (model / "model.safetensors").write_bytes(b"new weights")  # another model in the folder
    assert J.calibration(J.DEFAULT_TEMPLATE, J.JudgeSettings(str(model), 96)) is None


@pytest.mark.parametrize(
    ("answers", "said"),
    [
        (ALL_PASS, "agreed with the known verdict on 5 of 10 calibration answers"),
        (SELF_CONTRADICTING, "10 verdict(s) contradicted their own score"),
    ],
)
def test_a_judge_below_the_threshold_is_refused_saying_what_to_choose(
    model, no_worker, answers, said
):
    graded = job_in_home(data_paths().home, ROWS)
    found = calibrate(model, answers)
    assert found.state == "failed"
    db = open_store()
    try:
        with pytest.raises(J.JudgeError) as refused:
            J.start_judge(db, graded, J.DEFAULT_TEMPLATE, J.JudgeSettings(str(model)))
    finally:
        db.close()
    [problem] = refused.value.problems
    assert said in problem and "at least 8 needed" in problem and "cannot judge" in problem
    assert "bigger instruct model" in problem and "models folder" in problem
    assert refused.value.calibration
    assert [j.path.name for j in no_worker] == [found.job_id]  # no judge job was made


def test_an_uncalibrated_judge_is_not_started(model, no_worker):
    graded = job_in_home(data_paths().home, ROWS)
    db = open_store()
    try:
        with pytest.raises(J.JudgeError, match="has not been calibrated"):
            J.start_judge(db, graded, J.DEFAULT_TEMPLATE, J.JudgeSettings(str(model)))
    finally:
        db.close()
    assert no_worker == []


def test_a_cancelled_calibration_is_run_again(model, no_worker):
    from core.jobs.folder import cancel

    settings = J.JudgeSettings(str(model), 96)
    started = J.start_calibration(J.DEFAULT_TEMPLATE, settings)
    job = JobFolder(data_paths().jobs / started.job_id)
    cancel(job)  # no worker runs it here: it is marked cancelled at once
    assert job.read_status().state == "cancelled"
    assert J.calibration(J.DEFAULT_TEMPLATE, settings) is None


def test_core_judge_refuses_a_judge_that_failed_at_once(model, no_worker, tmp_path, capsys):
    from core.cli.main import main

    graded = job_in_home(data_paths().home, ROWS)
    calibrate(model, ALL_PASS)
    template = tmp_path / "judge.j2"
    template.write_text(J.DEFAULT_TEMPLATE, encoding="utf-8")
    code = main(["judge", graded, "--template", str(template), "--model", str(model)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert "refused: tiny-model agreed with the known verdict on 5 of 10" in captured.err
    assert "calibrating" not in captured.err and len(no_worker) == 1  # kept: not run again
