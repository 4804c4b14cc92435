"""Addresses that open a job, a result or a filtered view (issue 30, items 12 and 13), and the
Details box that follows the jobs chosen on Results; AppTest, no worker."""

from __future__ import annotations

import pytest

from tests.support.links import open_link, two_jobs, warnings
from tests.support.pages import job_in_home

pytestmark = pytest.mark.usefixtures("studio_home")


def test_results_write_the_job_filter_and_result_into_the_address(studio_home):
    older, _ = two_jobs(studio_home)
    at = open_link("results.py")
    at.selectbox(key="results_job").set_value(older).run()
    at.text_input(key="q").set_value("yes").run()
    at.multiselect(key="f_status").set_value(["succeeded"]).run()
    assert not at.exception
    params = at.query_params
    assert (params["job"], params["q"], params["status"], params["item"]) == (
        older,
        "yes",
        "succeeded",
        "a",
    )


def test_an_address_opens_results_on_its_job_filter_and_result(studio_home):
    older, _ = two_jobs(studio_home)
    at = open_link("results.py", job=older, status="succeeded", finish="length", item="c", case="1")
    assert at.checkbox(key="match_case").value is True
    assert at.selectbox(key="results_job").value == older  # not the newest job
    assert at.multiselect(key="f_status").value == ["succeeded"]
    assert at.multiselect(key="f_finish").value == ["length"]
    assert list(at.dataframe[0].value["custom_id"]) == ["c"]
    details = next(s for s in at.selectbox if s.label == "Details of")
    assert details.value == (older, "c")
    assert "<b>bold</b>\x07 end" in [t.value for t in at.text]  # c's answer in detail
    assert not at.warning


def test_an_address_opens_a_result_that_is_not_on_the_tables_first_page(studio_home):
    rows = [{"custom_id": f"r{i:03}", "answer": f"answer {i}"} for i in range(60)]
    job_id = job_in_home(studio_home, rows)
    at = open_link("results.py", job=job_id, item="r055")  # page 1 holds r000 to r049
    details = next(s for s in at.selectbox if s.label == "Details of")
    assert details.value == (job_id, "r055")
    assert "answer 55" in [t.value for t in at.text]


def test_an_address_with_unknown_values_says_so_and_shows_the_rest(studio_home):
    two_jobs(studio_home)
    default = open_link("results.py").selectbox(key="results_job").value
    at = open_link("results.py", job="job_gone", status=["succeeded", "lost"], item="zz")
    assert at.selectbox(key="results_job").value == default  # the page's own choice
    said = warnings(at)
    assert "The link's job 'job\\_gone' is not here" in said
    assert "'lost' is not here" in said and "'zz' is not here" in said
    assert at.multiselect(key="f_status").value == ["succeeded"]  # the known value kept
    default = open_link("monitor.py").selectbox(key="monitor_job").value
    at = open_link("monitor.py", job="<b>nope</b>")
    assert "is not here" in warnings(at) and "<b>" not in warnings(at)  # shown as text
    assert at.selectbox(key="monitor_job").value == default


def test_an_address_opens_the_monitor_on_its_job_and_a_choice_is_written_back(studio_home):
    older, newer = two_jobs(studio_home)
    at = open_link("monitor.py", job=older)
    assert at.selectbox(key="monitor_job").value == older
    at.selectbox(key="monitor_job").set_value(newer).run()
    assert at.query_params["job"] == newer


def test_the_details_box_follows_the_jobs_chosen_never_another_jobs_result(studio_home):
    """Issue 30, item 12: the Details box kept its place (and, for a moment in the browser,
    the label) of the job chosen before; a new choice of jobs opens on its own first
    result, and its labels name jobs by their names."""
    older, newer = two_jobs(studio_home)
    at = open_link("results.py", job=older)
    details = next(s for s in at.selectbox if s.label == "Details of")
    details.set_value((older, "d")).run()
    at.selectbox(key="results_job").set_value(newer).run()
    details = next(s for s in at.selectbox if s.label == "Details of")
    assert details.value == (newer, "x")
    assert details.options == ["x"]
    at.multiselect(key="results_more_jobs").set_value([older]).run()
    details = next(s for s in at.selectbox if s.label == "Details of")
    assert "a (tickets v1 · " in " ".join(details.options)  # the job's name, not its id
