"""The judge where people meet it (AppTest): the Checks page's Judge and Agreement sections,
and the pairwise judge on Compare."""

from __future__ import annotations

import json

import pytest

from core.config import data_paths
from core.experiments.runs import custom_id
from core.jobs.folder import JobFolder
from core.qa import judge as J
from core.qa.pairwise import swapped_keys
from core.schemas import job_label
from core.store.db import Store
from core.store.review import Label, save_label
from core.store.samples import sample_items
from tests.support.judge import answer_judge, input_lines, verdict
from tests.support.links import open_link
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


def test_compare_offers_the_pairwise_judge_for_two_variants_of_one_job(
    studio_home, model, no_worker
):
    """Issue 43: Compare opened on two slices (as the Experiments page's Open in Compare
    opens it) offers the pairwise judge; it judges the pairs item by item and its tally
    shows for that comparison."""
    rows = [
        {"custom_id": custom_id(t, p, 0), "prompt": f"q{t}", "answer": f"p{p} on t{t}"}
        for t in range(4)
        for p in (0, 1)
    ]
    job = job_in_home(studio_home, rows)
    link = {"mode": "slices", "job": job, "split": "variant", "va": "p1.m0", "vb": "p0.m0"}
    at = open_link("compare.py", **link, on="item")
    start_on_page(at, model, "pair")
    at.button(key="pair_start").click().run()
    assert not at.exception, [e.message for e in at.exception]
    [judge] = new_judge_jobs([job])
    spec = judge.read_spec().judge
    assert (spec.graded, spec.split, spec.values, spec.on) == (
        [job, job],
        "variant",
        ["p1.m0", "p0.m0"],
        "item",
    )
    items = [f"t{t}" for t in range(4)]
    assert [line["custom_id"] for line in input_lines(judge)] == items
    swapped = swapped_keys(items)  # answer 1 is B's there
    prefers = {"t0": "A", "t1": "A", "t2": "A", "t3": "B"}  # A: p1, B: p0
    winner = {i: "1" if (side == "A") != (i in swapped) else "2" for i, side in prefers.items()}
    answer_judge(judge, {i: json.dumps({"winner": w, "reason": "-"}) for i, w in winner.items()})
    at = open_link("compare.py", **link, on="item")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Judge prefers A"] == "3 (75%)" and metrics["Judge prefers B"] == "1 (25%)"
    at = open_link("compare.py", **{**link, "va": "p0.m0", "vb": "p1.m0"}, on="item")
    metrics = {m.label: m.value for m in at.metric}  # the same judge, its sides flipped
    assert metrics["Judge prefers A"] == "1 (25%)" and metrics["Judge prefers B"] == "3 (75%)"
    other = job_in_home(studio_home, rows, name="other")
    at = open_page("compare.py", cmp_a=job, cmp_b=other)  # two jobs: not this judge's
    assert "Mean tokens Δ (B−A)" in [m.label for m in at.metric]
    assert "Judge prefers A" not in [m.label for m in at.metric]


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
