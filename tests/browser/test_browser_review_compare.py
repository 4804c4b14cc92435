"""Issue 38, item 15, in chromium: Review opens on the job of its link (``?job=``), and
Compare's word diff reads as words, the removed ones apart from the added ones. Made-up
jobs, no engine; one walk."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from core.jobs.folder import JobFolder
from core.schemas import job_label
from tests.support.browser import (
    StreamlitServer,
    expect_no_exception,
    expect_title,
    screenshot,
    wait_idle,
)
from tests.support.jobs import finished_job

OLD = "Die Lieferung kam zu spät. Zürich ist es natürlich egal."
NEW = "Die Lieferung kam spät an. Zürich ist es nicht egal, es gefällt."


@pytest.mark.browser
def test_review_follows_its_job_link_and_compares_word_diff_reads_as_words(
    studio_server: StreamlitServer, chromium_page
) -> None:
    jobs = studio_server.home / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    made = []
    for name, answer in (("v1", OLD), ("v2", NEW)):
        job = finished_job(studio_server.home.parent / "build" / name, {"q1": answer})
        JobFolder(job.path.rename(jobs / job.job_id)).rename(f"tickets {name}")
        made.append(job.job_id)
    older, newer = made
    page = chromium_page

    # Review from a link to the older job: its New sample form open on that job, not on
    # the newest (which it opened on before, the link ignored).
    page.goto(f"{studio_server.url}/review?job={older}")
    expect_title(page, "Review", timeout=90_000)
    form = page.get_by_test_id("stExpander").filter(has_text="New sample")
    jobs_box = form.get_by_test_id("stMultiSelect").first  # "Jobs"; then the statuses
    expect(jobs_box).to_be_visible(timeout=60_000)  # open: no click needed
    expect(jobs_box).to_contain_text(job_label(older, "tickets v1"))
    expect(jobs_box).not_to_contain_text(job_label(newer, "tickets v2"))
    form.get_by_label("Sample name", exact=True).fill("from a link")
    form.get_by_role("button", name="Draw sample").click()
    wait_idle(page)
    expect(page.get_by_text(f"jobs {job_label(older, 'tickets v1')}")).to_be_visible()
    screenshot(page, "review_from_a_job_link")

    # The reviewer's name, typed once, is this browser's in a new session (issue 44 item 2):
    # as typed, markup and all, and never run as markup.
    name = page.get_by_label("Your name (labels are kept per reviewer)")
    name.fill('Zoë </script><b>"x"')
    name.press("Enter")
    wait_idle(page)
    page.goto(f"{studio_server.url}/review")
    expect_title(page, "Review", timeout=90_000)
    expect(page.get_by_label("Your name (labels are kept per reviewer)")).to_have_value(
        'Zoë </script><b>"x"', timeout=60_000
    )

    # Compare v1 with v2: the word diff as the page's text reads, word by word.
    page.goto(f"{studio_server.url}/compare?a={older}&b={newer}")
    expect_title(page, "Compare", timeout=90_000)
    diff = page.get_by_test_id("stHtml").filter(has_text="Lieferung")
    expect(diff).to_be_visible(timeout=60_000)
    words = diff.inner_text().split()
    assert set(words) <= set(OLD.split()) | set(NEW.split()), words  # none run together
    struck = diff.locator("span").first
    assert "line-through" in struck.evaluate("e => getComputedStyle(e).textDecorationLine")
    screenshot(page, "compare_word_diff")
    expect_no_exception(page)
