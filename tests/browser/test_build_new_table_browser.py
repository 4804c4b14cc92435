"""Build in the browser: a new table starts a fresh form (issue 58, item 12).

A browser keeps showing what a text box held until the server tells it otherwise, and
sends that back on the next click: forgetting a field on the server alone left the old
table's task, template and file name in the form, and Save built from them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from core.config import SAMPLE_DATA
from tests.support.browser import (
    StreamlitServer,
    choose,
    expect_no_exception,
    expect_title,
    open_page,
    type_into,
    wait_idle,
)

REVIEWS = b"review text,stars\nGreat service,5\nSlow delivery,2\n"
# The same file name, other content: another table all the same.
REVIEWS_AGAIN = b"review_id,comment\nr-9,Too loud at night\nr-10,Lovely staff\nr-11,Cold room\n"


def upload(page: Page, name: str, data: bytes) -> None:
    page.locator("input[type=file]").set_input_files(
        files=[{"name": name, "mimeType": "text/csv", "buffer": data}]
    )
    expect(page.get_by_text(f"{name}: ", exact=False).first).to_be_visible()
    wait_idle(page)


def expect_form(page: Page, *, ids: str, task: str, template: str, file_name: str) -> None:
    """The form as the browser shows it (not as the server last computed it)."""
    expect(page.get_by_role("combobox", name="Id column")).to_have_value(ids)
    expect(page.get_by_label("Task", exact=True)).to_have_value(task)
    expect(page.get_by_label("User prompt template (Jinja2)", exact=True)).to_have_value(template)
    expect(page.get_by_label("File name", exact=True)).to_have_value(file_name)


def saved_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.browser
def test_a_new_table_starts_a_fresh_form_and_save_builds_from_it(
    studio_server: StreamlitServer, chromium_page: Page
) -> None:
    page, uploads = chromium_page, studio_server.home / "uploads"
    page.goto(studio_server.url)
    expect_title(page, "Upload & check")
    open_page(page, "Build")

    upload(page, "tickets.csv", (SAMPLE_DATA / "tickets.csv").read_bytes())
    # The table's fresh form has reached the browser before it is edited: typed sooner,
    # the task lands in the run that sets the form afresh and names the file too.
    expect(page.get_by_label("File name", exact=True)).to_have_value("tickets.jsonl")
    choose(page, "Id column", "(row numbers)")
    type_into(page, "Task", "triage")
    type_into(page, "User prompt template (Jinja2)", "Triage: {{ subject }}")
    page.get_by_role("button", name="Save the batch file").click()
    expect(page.get_by_text("Saved tickets.jsonl: 40 of 40 rows written.")).to_be_visible()
    assert saved_lines(uploads / "tickets.jsonl")[0]["custom_id"] == "triage:1"

    # Another table: its own defaults in the form, and the old table's file is no longer
    # said to be saved.
    upload(page, "reviews.csv", REVIEWS)
    expect_form(
        page,
        ids="(row numbers)",
        task="reviews",
        template="{{ row['review text'] }}",
        file_name="reviews.jsonl",
    )
    expect(page.get_by_text("Saved tickets.jsonl", exact=False)).to_have_count(0)
    page.get_by_role("button", name="Save the batch file").click()
    expect(page.get_by_text("Saved reviews.jsonl: 2 of 2 rows written.")).to_be_visible()
    first = saved_lines(uploads / "reviews.jsonl")[0]
    assert first["custom_id"] == "reviews:1"
    assert first["body"]["messages"][-1]["content"] == "Great service"

    # The same name with other content is another table too.
    type_into(page, "Task", "stale")
    type_into(page, "User prompt template (Jinja2)", "{{ stars }} stars")
    upload(page, "reviews.csv", REVIEWS_AGAIN)
    expect(page.get_by_text("reviews.csv: 3 rows", exact=False)).to_be_visible()
    expect_form(
        page, ids="review_id", task="reviews", template="{{ comment }}", file_name="reviews.jsonl"
    )
    expect(page.get_by_text("Saved reviews.jsonl", exact=False)).to_have_count(0)
    expect(page.get_by_text("saving writes reviews-2.jsonl instead", exact=False)).to_be_visible()
    page.get_by_role("button", name="Save the batch file").click()
    expect(page.get_by_text("Saved reviews-2.jsonl: 3 of 3 rows written.")).to_be_visible()
    lines = saved_lines(uploads / "reviews-2.jsonl")
    assert [line["custom_id"] for line in lines] == ["reviews:r-9", "reviews:r-10", "reviews:r-11"]
    assert lines[0]["body"]["messages"][-1]["content"] == "Too loud at night"
    expect_no_exception(page)
