"""The judge where people meet it (AppTest): the Checks page's Judge and Agreement sections,
and the pairwise judge on Compare."""

from __future__ import annotations

import json

import pytest

from core.config import data_paths
from core.jobs.folder import JobFolder
from core.qa import judge as J
from core.schemas import job_label
from core.store.db import Store
from core.store.review import Label, save_label
from core.store.samples import sample_items
from tests.support.judge import answer_judge, verdict
from tests.support.pages import job_in_home, open_page, start_on_page

pytestmark = pytest.mark.usefixtures("studio_home", "calibrated_judges")

ROWS = [
    {"custom_id": "a", "answer": "Paris is the capital of France."},
    {"custom_id": "b", "answer": "2 + 2 = 5"},
    {"custom_id": "c", "answer": "<b>Blue</b> [link](http://example.com)"},
]


def new_judge_jobs(graded: list[str]) -> list[JobFolder]:
    return [
        job
        for job in (JobFolder(p) for p in sorted(data_paths().jobs.iterdir()))
        if job.path.name not in graded
    ]


def label_in_store(graded: str, labels: dict[str, str]) -> None:
    db = Store(data_paths().database)
    try:
        for custom_id, verdict_ in labels.items():
            save_label(db, graded, custom_id, "ana", Label(verdict_))
    finally:
        db.close()


def test_checks_page_starts_a_judge_and_shows_its_verdicts_and_agreement(
    studio_home, model, no_worker
):
    graded = job_in_home(studio_home, ROWS)
    JobFolder(data_paths().jobs / graded).rename("tickets v2")
    label_in_store(graded, {"a": "pass", "b": "fail", "c": "pass"})
    at = open_page("checks.py", job_id=graded)
    assert at.text_area(key="judge_template").value == J.DEFAULT_TEMPLATE
    assert any("No checks have run" in i.value for i in at.info)
    start_on_page(at, model)
    at.button(key="judge_start").click().run()
    assert not at.exception, [e.message for e in at.exception]
    [job] = new_judge_jobs([graded])
    assert no_worker == [job] or [j.job_id for j in no_worker] == [job.job_id]
    assert at.session_state["job_id"] == job.job_id  # the new job is the current one
    spec = job.read_spec()
    assert spec.judge.graded == [graded] and spec.engine.model == str(model)
    # The judge passes a and b and fails c; ana passed a and c and failed b.
    answer_judge(job, {"a": verdict("pass"), "b": verdict("pass"), "c": verdict("fail")})
    # Opened afresh, the page offers the graded job, not the newer judge job, to check.
    assert open_page("checks.py").multiselect(key="checks_jobs").value == [graded]

    at = open_page("checks.py", job_id=graded)
    name = spec.judge.check
    rates = at.dataframe[1].value  # the judges table comes first
    assert list(rates["rule"]) == [name]
    assert rates.iloc[0]["passed"] == 2 and rates.iloc[0]["failed"] == 1
    assert at.selectbox(key="agree_check").value == name
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Labels compared"] == "3" and metrics["Accuracy"] == "33%"
    assert metrics["Disagreements"] == "2"
    matrix = at.dataframe[-2].value
    assert matrix.loc["person: fail", "check: pass"] == 1
    assert matrix.loc["person: pass", "check: fail"] == 1
    shown = at.dataframe[-1].value  # the disagreements, answers as text
    assert list(shown["custom_id"]) == ["b", "c"]
    assert set(shown["job"]) == {job_label(graded, "tickets v2")}  # its name, not an id
    at.button(key="agree_review").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.session_state["sample_id"].startswith("smp_")
    assert at.title[0].value == "Review"  # on the page that labels them
    db = Store(data_paths().database)
    items = sample_items(db, at.session_state["sample_id"])
    db.close()
    assert list(items["custom_id"]) == ["b", "c"]


def test_a_bad_template_on_the_page_names_its_line_and_starts_nothing(
    studio_home, model, no_worker
):
    job_in_home(studio_home, ROWS)
    at = open_page("checks.py")
    start_on_page(at, model)
    at.text_area(key="judge_template").set_value("Answer:\n{{ answer }\n{% endif %}").run()
    at.button(key="judge_start").click().run()
    assert not at.exception
    assert any("not started" in e.value for e in at.error)
    assert any("template line 2" in t.value for t in at.text)
    assert no_worker == []


def test_compare_page_starts_a_pairwise_judge_and_tallies_it(studio_home, model, no_worker):
    ids = ["p0", "p1", "p2", "p3"]
    job_a = job_in_home(studio_home, [{"custom_id": i, "answer": f"A {i}"} for i in ids])
    job_b = job_in_home(studio_home, [{"custom_id": i, "answer": f"B {i}"} for i in ids], name="b")
    at = open_page("compare.py")
    at.selectbox(key="cmp_a").set_value(job_a).run()
    at.selectbox(key="cmp_b").set_value(job_b).run()
    start_on_page(at, model, "pair")
    at.button(key="pair_start").click().run()
    assert not at.exception, [e.message for e in at.exception]
    [job] = new_judge_jobs([job_a, job_b])
    assert job.read_spec().judge.graded == [job_a, job_b]
    # The judge always says "1": position bias, which the swap turns into 2 A and 2 B.
    answer_judge(job, {i: json.dumps({"winner": "1", "reason": "first"}) for i in ids})
    at = open_page("compare.py", cmp_a=job_a, cmp_b=job_b)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Judge prefers A"] == "2 (50%)" and metrics["Judge prefers B"] == "2 (50%)"
    assert metrics["Judge: tie"] == "0 (0%)" and metrics["Not graded"] == "0"
    assert any("95% CI" in c.value for c in at.caption)


def test_removing_and_adding_the_job_again_keeps_the_judge_template(studio_home, model, no_worker):
    """Issue 30, item 9: the template was emptied, and Start then refused it."""
    graded = job_in_home(studio_home, ROWS)
    at = open_page("checks.py", job_id=graded)
    mine = "Is this right? {{ answer }}"
    at.text_area(key="judge_template").set_value(mine).run()
    at.multiselect(key="checks_jobs").set_value([]).run()
    assert any("Choose at least one job" in i.value for i in at.info)
    at.multiselect(key="checks_jobs").set_value([graded]).run()
    assert not at.exception
    assert at.text_area(key="judge_template").value == mine
    start_on_page(at, model)
    at.button(key="judge_start").click().run()
    (judge,) = new_judge_jobs([graded])
    assert J.saved_template(judge) == mine
