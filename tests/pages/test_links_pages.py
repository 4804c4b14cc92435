"""Addresses of Results' sort and page, Review, Checks, Compare and Dashboards (issue 30's
second day): a view chosen is written into the address, the address opened in a new session
shows that view, and a value that is not here (or cannot be read) is said, in plain text,
beside the page's own default. AppTest, no worker; the browser walk is
tests/browser/test_links_browser.py."""

from __future__ import annotations

import pytest

from core.config import data_paths
from core.qa.grading import grade_jobs
from core.qa.rules import load_rules
from core.store.db import Store
from tests.support.grading import RULES
from tests.support.links import open_link, two_jobs, warnings
from tests.support.pages import job_in_home, shown

pytestmark = pytest.mark.usefixtures("studio_home")

SIXTY = [{"custom_id": f"r{i:03}", "answer": f"answer {i}"} for i in range(60)]


def markdown(at) -> str:
    return " ".join(m.value for m in at.markdown)


def said(at) -> str:
    """The page's warnings as a person reads them (markdown escapes undone)."""
    return shown(warnings(at))


def test_results_write_their_sort_and_page_and_an_address_opens_them(studio_home):
    job_id = job_in_home(studio_home, SIXTY)
    at = open_link("results.py")
    at.selectbox(key="sort").set_value("custom_id").run()
    at.toggle(key="descending").set_value(True).run()
    at.selectbox(key="page_size").set_value(25).run()
    at.number_input(key="page_no").set_value(2).run()
    params = at.query_params
    assert (params["sort"], params["desc"], params["rows"], params["page"]) == (
        "custom_id",
        "1",
        "25",
        "2",
    )
    at = open_link("results.py", job=job_id, sort="custom_id", desc="1", rows="25", page="2")
    assert at.selectbox(key="sort").value == "custom_id" and at.toggle(key="descending").value
    assert at.number_input(key="page_no").value == 2
    assert list(at.dataframe[0].value["custom_id"])[:2] == ["r034", "r033"]  # 59..35, then
    assert not at.warning


def test_an_address_with_a_bad_sort_or_page_says_so_and_shows_page_one(studio_home):
    job_in_home(studio_home, SIXTY)
    at = open_link("results.py", sort="colour", page="x")
    text = said(at)
    assert "The link's sort 'colour' is not here" in text
    assert "The link's page 'x' cannot be read" in text
    assert at.selectbox(key="sort").value == "line_no"
    at = open_link("results.py", page="9")  # 60 results: 2 pages of 50
    assert "The link's page '9' is past the last (2); page 1 is shown" in said(at)
    assert at.number_input(key="page_no").value == 1
    assert at.dataframe[0].value["custom_id"].iloc[0] == "r000"


def test_review_writes_its_sample_item_and_tab_and_an_address_opens_them(studio_home):
    job_in_home(studio_home)
    at = open_link("review.py")
    at.text_input(key="sample_name").set_value("four")
    at.button[0].click().run()  # the form's "Draw sample"
    at.text_input(key="reviewer").set_value("ana").run()
    next(b for b in at.button if b.label == "Next").click().run()
    next(b for b in at.button if b.label == "Next").click().run()
    sample_id, item = at.query_params["sample"], at.query_params["item"]
    assert item == "3" and "Item 3 of 4" in markdown(at)
    at = open_link("review.py", sample=sample_id, item="3")
    at.text_input(key="reviewer").set_value("bo").run()
    assert "Item 3 of 4" in markdown(at)  # the same item in a new session
    at = open_link("review.py", sample=sample_id, tab="Progress & agreement")
    assert any(m.label == "Pass rate, all reviewers" for m in at.metric)  # that tab open
    at = open_link("review.py", sample="sample_gone", item="7")
    text = said(at)
    assert "The link's sample 'sample_gone' is not here" in text
    assert "The link's item '7' is past the last (4); item 1 is shown" in text


def test_checks_write_their_jobs_and_check_and_an_address_opens_them(studio_home):
    older, _ = two_jobs(studio_home)
    db = Store(data_paths().database)
    db.ingest_all(data_paths().jobs)
    grade_jobs(db, [older], load_rules(RULES), RULES)
    db.close()
    at = open_link("checks.py", jobs=older)
    at.selectbox(key="checks_rule").set_value("no_refusal").run()
    at.radio(key="checks_by").set_value("model").run()
    params = at.query_params
    assert (params["jobs"], params["check"], params["per"], params["outcome"]) == (
        older,
        "no_refusal",
        "model",
        "failed",
    )
    at = open_link("checks.py", jobs=[older, "job_gone"], check="no_refusal", per="model")
    assert at.multiselect(key="checks_jobs").value == [older]  # not the newest job
    assert at.selectbox(key="checks_rule").value == "no_refusal"
    assert at.radio(key="checks_by").value == "model"
    assert "The link's jobs 'job_gone' is not here" in said(at)
    default = open_link("checks.py").multiselect(key="checks_jobs").value
    at = open_link("checks.py", jobs="job_gone")  # none of the link's jobs: the default
    assert at.multiselect(key="checks_jobs").value == default != []
    at = open_link("checks.py", jobs=older, check="gone")
    assert "The link's check 'gone' is not here" in said(at)
    assert at.selectbox(key="checks_rule").value == "mentions_refund"  # the first


def test_compare_writes_its_jobs_and_pair_and_an_address_opens_them(studio_home):
    first, second = job_in_home(studio_home, name="one"), job_in_home(studio_home, name="two")
    at = open_link("compare.py")
    at.selectbox(key="cmp_a").set_value(second).run()
    at.selectbox(key="cmp_b").set_value(first).run()
    at.button(key="cmp_next").click().run()
    params = at.query_params
    assert (params["a"], params["b"], params["pair"]) == (second, first, "2")
    at = open_link("compare.py", a=second, b=first, pair="2")
    assert (at.selectbox(key="cmp_a").value, at.selectbox(key="cmp_b").value) == (second, first)
    assert "Pair 2 of 4" in markdown(at)
    at = open_link("compare.py", mode="slices", job=first, split="prompt_version", on="nope")
    assert at.radio(key="cmp_mode").value == "slices"
    assert at.selectbox(key="cmp_job").value == first
    at = open_link("compare.py", a="job_gone", pair="x")
    text = said(at)
    assert "The link's a 'job_gone' is not here" in text
    assert "The link's pair 'x' cannot be read" in text
    assert "Pair 1 of" in markdown(at)


def test_dashboards_write_their_jobs_dates_and_charts_and_an_address_opens_them(studio_home):
    older, newer = two_jobs(studio_home)
    at = open_link("dashboards.py")
    at.multiselect(key="dash_jobs").set_value([older]).run()
    at.selectbox(key="dash_by").set_value("model").run()
    at.selectbox(key="dash_html").set_value("latency").run()
    params = at.query_params
    assert (params["jobs"], params["by"], params["chart"]) == (older, "model", "latency")
    at = open_link(
        "dashboards.py", jobs=older, by="model", chart="latency", **{"from": "2020-01-31"}
    )
    assert at.multiselect(key="dash_jobs").value == [older]
    assert str(at.date_input(key="dash_from").value) == "2020-01-31"
    assert at.selectbox(key="dash_by").value == "model"
    assert at.selectbox(key="dash_html").value == "latency"
    assert at.query_params["from"] == "2020-01-31"
    at = open_link("dashboards.py", jobs=["job_gone", newer], to="2026-13-45", by="colour")
    assert "The link's jobs 'job_gone' is not here" in said(at)
    assert "The link's to '2026-13-45' cannot be read" in said(at)
    assert "The link's by 'colour' is not here" in said(at)
    assert at.multiselect(key="dash_jobs").value == [newer]
