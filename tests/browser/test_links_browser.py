"""Addresses that open a job, a result or a filtered view, in the real browser (issue 30,
items 12 and 13); made-up jobs, no engine."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, expect

from core.jobs.folder import JobFolder
from core.plan.pricing import ModelPrice, PriceTable, save_prices
from core.schemas import job_label
from tests.support.browser import (
    StreamlitServer,
    choose,
    expect_no_exception,
    expect_title,
    grid_rows,
    metric_value,
    open_page,
    screenshot,
    settle,
    type_into,
    wait_idle,
)
from tests.support.grading import RULES
from tests.support.jobs import finished_job
from tests.support.results import ROWS

# Four requests, three with tokens (3,005 in, 603 out: 812.55 per million at the prices of
# the walk), and an answer for no_refusal to fail.
PRICED = [
    {"custom_id": "a", "answer": "yes", "prompt_tokens": 1000, "tokens": 500},
    {"custom_id": "b", "answer": "I'm sorry, but I can't help with that.", "prompt_tokens": 2000,
     "tokens": 100},
    {"custom_id": "c", "answer": "a refund is on its way"},
    {"custom_id": "d", "answer": None, "error": ("engine_error", "the engine stopped")},
]  # fmt: skip


def finished_with_samples(job: JobFolder) -> None:
    """Gives a finished job the speed samples of a 5 s run: 3 requests, 16 tokens."""
    now = time.time()
    samples = [
        {"t": now - 4, "done": 0, "completion_tokens": 0},
        {"t": now - 2, "done": 2, "completion_tokens": 10},
        {"t": now, "done": 3, "completion_tokens": 16},
    ]
    job.metrics.write_text("".join(json.dumps(s) + "\n" for s in samples))
    status = job.read_status()
    status.started_at = datetime.fromtimestamp(now - 5, UTC).isoformat()
    status.finished_at = datetime.fromtimestamp(now, UTC).isoformat()  # its end, and...
    status.run_done, status.run_completion_tokens = 3, 16  # ...what it did, as the samples
    job.write_status(status)


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


def type_choice(page: Page, label: str, option: str) -> None:
    """Picks ``option`` in a selectbox by typing it (a click on an option of a long list, or
    of a box low on a long page, can miss: the list shows a few options at a time)."""
    box = page.get_by_role("combobox", name=label, exact=True)
    box.click()
    box.press_sequentially(option)
    page.keyboard.press("Enter")
    wait_idle(page)
    expect(box).to_have_value(option)


def same_view_elsewhere(page: Page, title: str) -> Page:
    """The page's address opened in a new browser context (no cookies, a new session), as
    a colleague opens a shared link; waits for its first widgets."""
    other = page.context.browser.new_context().new_page()
    other.goto(page.url)
    expect_title(other, title)
    other.get_by_test_id("stWidgetLabel").first.wait_for(timeout=90_000)  # code fetched
    wait_idle(other)
    return other


@pytest.mark.browser
def test_a_view_chosen_on_each_page_opens_the_same_from_its_address_in_the_browser(
    studio_server: StreamlitServer, chromium_page
) -> None:
    """Issue 30's second day: on Results (sort), Review (sample and item), Checks (check),
    Compare (jobs and pair) and Dashboards (grouping and chart) a view is chosen, its
    address opened in a fresh browser context shows the same. On the way, what was only
    AppTest-tested: a finished job's averages on Monitor are not 0.00, and Dashboards'
    table shows the cost when prices are set."""
    home = studio_server.home
    jobs = home / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    made = []
    for name in ("v1", "v2"):  # the same four requests, paired on Compare
        job = finished_job(home.parent / "build" / name, PRICED)
        JobFolder(job.path.rename(jobs / job.job_id)).rename(f"tickets {name}")
        made.append(job.job_id)
    older, _ = made
    (jobs / older / "rules.yaml").write_text(RULES, encoding="utf-8")  # graded on Checks
    finished_with_samples(JobFolder(jobs / older))
    save_prices(PriceTable(models={"tiny": ModelPrice(input_per_1m=0.15, output_per_1m=0.6)}), home)
    page = chromium_page

    # Monitor: a finished job's speed is its average over the run (it read 0.00).
    page.goto(f"{studio_server.url}/monitor?job={older}")
    expect_title(page, "Monitor")
    expect(metric_value(page, "Requests/s (average)")).to_have_text("0.75", timeout=90_000)
    expect(metric_value(page, "Output tokens/s (average)")).to_have_text("4")

    # Results: sorted by custom_id, descending.
    page.goto(f"{studio_server.url}/results?job={older}")
    expect_title(page, "Results")
    page.get_by_role("combobox", name="Sort by", exact=True).wait_for(timeout=90_000)
    type_choice(page, "Sort by", "custom_id")
    page.get_by_test_id("stCheckbox").filter(has_text="Descending").locator("label").click()
    wait_idle(page)
    assert "sort=custom_id" in page.url and "desc=1" in page.url, page.url
    other = same_view_elsewhere(page, "Results")
    expect(other.get_by_role("combobox", name="Sort by", exact=True)).to_have_value("custom_id")
    grid = other.get_by_test_id("stDataFrame").first
    expect(grid.locator("tbody tr").first.locator("td").first).to_have_text("d")
    screenshot(other, "links_4_results_sorted_elsewhere")
    other.context.close()

    # Review: a sample drawn, its third item.
    open_page(page, "Review")
    page.get_by_role("textbox", name="Sample name").fill("four")
    page.get_by_role("button", name="Draw sample").click()
    expect(page.get_by_text("Sample four drawn", exact=False)).to_be_visible()
    type_into(page, "Your name (labels are kept per reviewer)", "ana")
    for _ in range(2):
        page.get_by_role("button", name=re.compile("^Next")).first.click()
        wait_idle(page)
    expect(page.get_by_text("Item 3 of 4", exact=False)).to_be_visible()
    other = same_view_elsewhere(page, "Review")
    type_into(other, "Your name (labels are kept per reviewer)", "bo")
    expect(other.get_by_text("Item 3 of 4", exact=False)).to_be_visible()
    other.context.close()

    # Checks: the failures of one check.
    open_page(page, "Checks")
    page.get_by_role("combobox", name="Rule", exact=True).wait_for(timeout=60_000)
    expect(page.get_by_text("Grading", exact=False)).to_have_count(0, timeout=60_000)  # redrawn
    settle(page)  # the tables above drawn: the box no longer moves under the click
    type_choice(page, "Rule", "no_refusal")
    other = same_view_elsewhere(page, "Checks")
    expect(other.get_by_role("combobox", name="Rule", exact=True)).to_have_value("no_refusal")
    other.context.close()

    # Compare: the two jobs, the second pair.
    open_page(page, "Compare")
    page.get_by_role("button", name="Next →").click()
    wait_idle(page)
    expect(page.get_by_text("Pair 2 of 4", exact=False)).to_be_visible()
    other = same_view_elsewhere(page, "Compare")
    expect(other.get_by_text("Pair 2 of 4", exact=False)).to_be_visible()
    expect(other.get_by_role("combobox", name="A", exact=True)).to_have_value(
        job_label(older, "tickets v1")
    )
    other.context.close()

    # Dashboards: the cost with prices set; grouped by model, the latency chart chosen.
    open_page(page, "Dashboards")
    grid = page.get_by_test_id("stDataFrame").filter(has_text="tickets v1")  # not the prices'
    expect(grid).to_contain_text("cost (USD)", timeout=60_000)
    costs = {row[0]: row[1] for row in grid_rows(grid)}
    assert set(costs.values()) == {"0.000813"}, costs  # each job: 3005 x 0.15 + 603 x 0.60
    type_choice(page, "Group by", "model")
    type_choice(page, "Chart to download as HTML", "latency")
    # The address carries both (written by the page's run, which a busy machine may finish
    # after the widgets settle): what a user copies.
    expect(page).to_have_url(re.compile(r"(?=.*\bby=model\b)(?=.*\bchart=latency\b)"))
    other = same_view_elsewhere(page, "Dashboards")
    expect(other.get_by_role("combobox", name="Group by", exact=True)).to_have_value("model")
    chart = other.get_by_role("combobox", name="Chart to download as HTML", exact=True)
    expect(chart).to_have_value("latency")
    screenshot(other, "links_5_dashboards_elsewhere")
    expect_no_exception(other)
    other.context.close()
    expect_no_exception(page)
