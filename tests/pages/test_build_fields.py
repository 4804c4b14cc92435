"""The Build page's fields follow the table: a new upload starts its own task, template and
id column, and row numbers as ids are said plainly (issue 38, item 15)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.pages import open_build_page, shown

REVIEWS = b"review text,stars\nGreat service,5\nSlow delivery,2\n"


def test_a_new_upload_resets_task_template_and_ids_and_row_numbers_are_said(
    studio_home: Path,
) -> None:
    at = open_build_page()  # the sample table, tickets.csv
    at.text_input(key="build_task").set_value("triage").run()
    at.text_area(key="build_user").set_value("Triage: {{ subject }}").run()
    assert json.loads(at.code[0].value)["custom_id"] == "triage:T-2001"
    assert not at.warning

    at.radio(key="build_source").set_value("Upload a table").run()
    at.file_uploader[0].upload("reviews.csv", REVIEWS, "text/csv").run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.text_input(key="build_task").value == "reviews"
    assert at.text_area(key="build_user").value == "{{ row['review text'] }}"
    assert at.selectbox(key="build_id").value == "(row numbers)"
    assert at.text_input(key="build_file_name").value == "reviews.jsonl"
    first = json.loads(at.code[0].value)
    assert first["custom_id"] == "reviews:1"
    assert first["body"]["messages"][-1]["content"] == "Great service"
    said = [shown(w.value) for w in at.warning]
    assert any(
        "No column is named `id` or `*_id`, so each line's custom_id is its row number "
        "(reviews:1, reviews:2, ...)" in w
        for w in said
    ), said

    at.selectbox(key="build_id").set_value("stars").run()  # the user picks one: no warning
    assert json.loads(at.code[0].value)["custom_id"] == "reviews:5"
    assert not at.warning
