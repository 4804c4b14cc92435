"""Addresses that open a job, a result or a filtered view, in the real browser (issue 30,
items 12 and 13); made-up jobs, no engine."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import expect

from core.jobs.folder import JobFolder
from core.schemas import job_label
from tests.browser_support import (
    StreamlitServer,
    choose,
    expect_no_exception,
    expect_title,
    screenshot,
    type_into,
    wait_idle,
)
from tests.factories import finished_job
from tests.test_results import ROWS

# What the "Details of" box shows (not faded as the last run's), read at every frame painted.
RECORD_DETAILS = """
window.__details = [];
const tick = () => {
  for (const box of document.querySelectorAll('[data-testid="stSelectbox"]')) {
    if (!box.textContent.includes("Details of")) continue;
    if (box.closest('[data-stale="true"]')) continue;  // faded: the run before, going
    const shown = box.querySelector('[data-testid="stSelectboxValue"], input');
    const text = (shown && (shown.value || shown.textContent) || "").trim();
    if (text && window.__details.at(-1) !== text) window.__details.push(text);
  }
  requestAnimationFrame(tick);
};
requestAnimationFrame(tick);
"""


def made_jobs(server: StreamlitServer) -> tuple[str, str]:
    """Two finished jobs in the server's data folder, named "tickets v1" and "v2"."""
    jobs = server.home / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    made = []
    for name, rows in (("v1", ROWS), ("v2", [{"custom_id": "x", "answer": "new"}])):
        job = finished_job(server.home.parent / "build" / name, rows)
        JobFolder(job.path.rename(jobs / job.job_id)).rename(f"tickets {name}")
        made.append(job.job_id)
    return made[0], made[1]


@pytest.mark.browser
def test_an_address_opens_results_on_a_job_filter_and_result_and_follows_the_page(
    studio_server: StreamlitServer, chromium_page
) -> None:
    older, newer = made_jobs(studio_server)
    page = chromium_page
    page.add_init_script(RECORD_DETAILS)
    page.goto(f"{studio_server.url}/results?job={older}&status=succeeded&item=c")
    expect_title(page, "Results")
    job = page.get_by_role("combobox", name="Job", exact=True)
    job.wait_for(timeout=90_000)  # a fresh browser fetches the selectbox's code first
    expect(job).to_have_value(re.compile("^tickets v1 · "))
    expect(page.get_by_text("3 results (rows 1–3 shown)")).to_be_visible()
    answer = page.get_by_test_id("stText").filter(has_text="<b>bold</b>")  # c's, in detail
    expect(answer).to_be_visible()
    screenshot(page, "links_1_results_from_an_address")

    type_into(page, re.compile("^Search prompts and answers"), "yes")
    wait_idle(page)
    expect(page.get_by_text("1 results (rows 1–1 shown)")).to_be_visible()
    query = parse_qs(urlparse(page.url).query)
    assert (query["job"], query["q"], query["status"]) == ([older], ["yes"], ["succeeded"])

    bookmark = page.context.browser.new_page()  # the address, opened elsewhere: the same
    bookmark.goto(page.url)
    expect_title(bookmark, "Results")
    bookmark.get_by_role("combobox", name="Job", exact=True).wait_for(timeout=90_000)
    expect(bookmark.get_by_text("1 results (rows 1–1 shown)")).to_be_visible()
    expect(bookmark.get_by_label(re.compile("^Search prompts"))).to_have_value("yes")
    bookmark.close()

    # Another job: the Details box shows its result, never again the one chosen before
    # (it kept showing the other job's id; here the table has a, c and d, the job x).
    type_into(page, re.compile("^Search prompts and answers"), "")
    wait_idle(page)
    page.evaluate("window.__details = []")
    choose(page, "Job", job_label(newer, "tickets v2"))
    expect(page.get_by_text("1 results (rows 1–1 shown)")).to_be_visible()
    wait_idle(page)
    shown = page.evaluate("window.__details")
    print("DETAILS", shown)
    assert "x" in shown and set(shown[shown.index("x") :]) == {"x"}, shown
    screenshot(page, "links_2_details_of_the_job_chosen")
    expect_no_exception(page)


@pytest.mark.browser
def test_an_address_with_a_job_that_is_not_here_says_so(
    studio_server: StreamlitServer, chromium_page
) -> None:
    made_jobs(studio_server)
    page = chromium_page
    page.goto(f"{studio_server.url}/monitor?job=job_gone")
    expect_title(page, "Monitor")
    expect(page.get_by_text("The link's job 'job_gone' is not here", exact=False)).to_be_visible()
    expect(page.get_by_test_id("stMetric").first).to_be_visible(timeout=90_000)
    expect_no_exception(page)
    screenshot(page, "links_3_unknown_job")
