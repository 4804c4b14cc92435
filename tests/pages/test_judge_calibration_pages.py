"""The pages tests of tests/unit/test_judge_calibration.py (split from it by kind; docs/tests.md).

A judge is offered only once it has shown it can (issue 38, item 12): its calibration on
answers whose verdicts are known, the threshold, the kept result, and the refusals of
``start_judge``, ``core judge`` and the Checks page.

The calibration jobs here are answered by the real worker with a scripted executor in place
of the engine; tests/engine/test_judge_engine.py calibrates the built-in model for real."""

from __future__ import annotations

import pytest

from core.config import data_paths
from tests.support.judge import ROWS, answer_judge
from tests.support.judge_calibration import RIGHT, SELF_CONTRADICTING, calibrate
from tests.support.pages import job_in_home, open_page

pytestmark = pytest.mark.usefixtures("studio_home")


def test_checks_page_does_not_offer_a_judge_that_failed_and_says_why(default_model, no_worker):
    job_in_home(data_paths().home, ROWS)
    calibrate(default_model, SELF_CONTRADICTING)
    at = open_page("checks.py")
    assert not at.exception, [e.message for e in at.exception]
    options = at.selectbox(key="judge_model").options
    assert default_model.name not in options
    [warning] = [w.value for w in at.warning if "Not offered as a judge" in w.value]
    assert "0 of 10" in warning and "bigger instruct model" in warning


def test_checks_page_offers_only_chat_models_as_judges_and_only_advice_that_applies(
    default_model, embedding_model, no_worker
):
    """Issue 58 item 13: once the chat model failed, the embedding model was offered, and
    starting it printed one refusal per calibration line, none of them the reason."""
    job_in_home(data_paths().home, ROWS)
    calibrate(default_model, SELF_CONTRADICTING)
    jobs = len(no_worker)  # the chat model's calibration
    at = open_page("checks.py")
    options = at.selectbox(key="judge_model").options
    assert embedding_model.name not in options and default_model.name not in options
    at.selectbox(key="judge_model").set_value("Another folder…").run()
    at.text_input(key="judge_model_path").set_value(str(embedding_model)).run()
    at.button(key="judge_start").click().run()
    assert not at.exception, [e.message for e in at.exception]
    [said] = [t.value for t in at.text]
    assert said.startswith(f"{embedding_model.name} is an embedding model: it writes no verdict")
    assert said.count("\n") == 0 and len(no_worker) == jobs  # one sentence; no job started


def test_checks_page_calibrates_a_new_judge_before_it_judges(model, no_worker):
    from tests.support.pages import start_on_page

    graded = job_in_home(data_paths().home, ROWS)
    at = open_page("checks.py", job_id=graded)
    start_on_page(at, model)
    at.button(key="judge_start").click().run()
    assert not at.exception, [e.message for e in at.exception]
    [info] = [i.value for i in at.info if "being calibrated" in i.value]
    assert "grades 10 answers whose verdicts are known" in info
    [job] = no_worker  # the calibration job, no judge job
    assert job.read_spec().judge is None
    answer_judge(job, RIGHT)
    at.button(key="judge_start").click().run()  # passed: now the judge job starts
    assert not at.exception, [e.message for e in at.exception]
    assert len(no_worker) == 2 and no_worker[1].read_spec().judge.graded == [graded]
