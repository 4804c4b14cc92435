"""The pages tests of tests/unit/test_builder.py (split from it by kind; docs/tests.md).

Building a batch file from a table: the builder, the CLI command and the Build page."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from core.config import REPO_ROOT
from core.plan.builder import read_table
from tests.support.builder import TICKETS
from tests.support.pages import open_build_page, shown


def test_build_page_previews_reports_rows_and_saves(studio_home: Path) -> None:
    at = open_build_page()
    at.selectbox(key="build_id").set_value("ticket_id").run()
    at.text_area(key="build_user").set_value("{{ subject }}\n\n{{ body }}").run()
    assert not at.exception, [e.message for e in at.exception]
    first = json.loads(at.code[0].value)
    assert first["custom_id"] == "tickets:T-2001"
    assert "39 of 40 rows become lines." in [c.value for c in at.caption]
    problems = at.dataframe[-1].value
    assert list(problems["row"]) == [16]
    at.button(key="build_save").click().run()
    saved = Path(at.session_state["built_file"])
    assert saved.parent == studio_home / "uploads" and len(saved.read_text().splitlines()) == 39
    assert shown(at.success[0].value) == "Saved tickets.jsonl: 39 of 40 rows written."
    assert str(saved) in [c.value for c in at.code]  # where the file is, on the server


def test_the_build_draft_survives_leaving_the_page_and_ids_default_to_an_id_column(
    studio_home: Path,
) -> None:
    at = open_build_page()
    assert at.selectbox(key="build_id").value == "ticket_id"  # the table's *_id column
    at.text_input(key="build_task").set_value("triage").run()
    at.text_area(key="build_user").set_value("Triage: {{ subject }}").run()
    at.number_input(key="build_max_tokens").set_value(32).run()
    at.switch_page("pages/upload.py").run()
    at.switch_page("pages/build.py").run()
    assert not at.exception
    assert at.radio(key="build_source").value == "Use the sample table"
    assert at.text_input(key="build_task").value == "triage"
    assert at.text_area(key="build_user").value == "Triage: {{ subject }}"
    assert at.number_input(key="build_max_tokens").value == 32
    first = json.loads(at.code[0].value)
    assert first["custom_id"] == "triage:T-2001"
    assert first["body"]["messages"][-1]["content"].startswith("Triage: ")


def test_build_page_names_a_missing_column(studio_home: Path) -> None:
    at = open_build_page()
    at.text_area(key="build_user").set_value("{{ priority }}").run()
    assert "'priority', which the table does not have" in shown(at.error[0].value)
    assert not at.code


def test_build_page_makes_an_embeddings_batch(studio_home: Path) -> None:
    at = open_build_page()
    at.radio(key="build_kind").set_value("Embeddings").run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.selectbox(key="build_id").value == "ticket_id"
    at.selectbox(key="build_embed_column").set_value("body").run()
    at.number_input(key="build_rows_per_line").set_value(4).run()
    at.multiselect(key="build_meta_columns").set_value(["customer_tier"]).run()
    assert not at.exception, [e.message for e in at.exception]
    first = json.loads(at.code[0].value)
    assert first["url"] == "/v1/embeddings" and first["custom_id"] == "tickets:T-2001..T-2004"
    assert len(first["body"]["input"]) == 4
    assert first["body"]["metadata"]["customer_tier"] == ["pro", "free", "enterprise", "pro"]
    assert "39 of 40 rows become lines (10 lines)." in [c.value for c in at.caption]
    assert list(at.dataframe[-1].value["row"]) == [16]
    at.button(key="build_save").click().run()
    saved = Path(at.session_state["built_file"])
    assert len(saved.read_text().splitlines()) == 10
    assert shown(at.success[0].value) == "Saved tickets.jsonl: 39 of 40 rows written in 10 lines."
    # The draft, embeddings included, is kept while the user is on another page.
    at.switch_page("pages/upload.py").run()
    at.switch_page("pages/build.py").run()
    assert at.radio(key="build_kind").value == "Embeddings"
    assert at.number_input(key="build_rows_per_line").value == 4
    assert at.selectbox(key="build_embed_column").value == "body"


def test_saving_never_overwrites_a_file_of_the_same_name_silently(studio_home: Path) -> None:
    """Issue 30, item 8: an embeddings batch replaced the chat batch tickets.jsonl."""
    at = open_build_page()
    at.button(key="build_save").click().run()
    chat = studio_home / "uploads" / "tickets.jsonl"
    chat_text = chat.read_text()
    at.radio(key="build_kind").set_value("Embeddings").run()
    warning = shown(at.warning[-1].value)
    assert "tickets.jsonl is in the uploads folder already" in warning
    assert "saving writes tickets-2.jsonl instead" in warning
    at.button(key="build_save").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert chat.read_text() == chat_text  # the chat batch is untouched
    embed = studio_home / "uploads" / "tickets-2.jsonl"
    assert '"/v1/embeddings"' in embed.read_text()
    assert shown(at.success[0].value).startswith("Saved tickets-2.jsonl: ")
    # Replacing is a choice made by name, never the default.
    at.checkbox(key="build_replace").check().run()
    at.button(key="build_save").click().run()
    assert '"/v1/embeddings"' in chat.read_text()
    assert shown(at.success[0].value).startswith("Saved tickets.jsonl: ")


def test_the_build_draft_is_kept_in_the_data_folder_across_a_reload(studio_home: Path) -> None:
    """Issue 30, item 9: a browser reload (a new session) dropped the draft."""
    at = open_build_page()
    at.text_input(key="build_task").set_value("triage").run()
    at.text_area(key="build_user").set_value("Triage: {{ subject }}").run()
    at.number_input(key="build_max_tokens").set_value(32).run()
    reloaded = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60).run()
    reloaded.switch_page("pages/build.py").run()  # a new session: nothing in it yet
    assert not reloaded.exception, [e.message for e in reloaded.exception]
    assert reloaded.radio(key="build_source").value == "Use the sample table"
    assert reloaded.text_input(key="build_task").value == "triage"
    assert reloaded.text_area(key="build_user").value == "Triage: {{ subject }}"
    assert reloaded.number_input(key="build_max_tokens").value == 32
    assert (studio_home / "drafts").is_dir()


def test_the_defaults_pick_the_text_column_never_a_timestamp(studio_home: Path) -> None:
    """Issue 30, item 12: the template and the embedded text defaulted to created_at."""
    from core.plan.tables import default_text_column

    table = read_table(TICKETS)
    assert default_text_column(table, "ticket_id") == "body"
    short = table[["ticket_id", "created_at", "channel"]]
    assert default_text_column(short, "ticket_id") == "channel"
    assert default_text_column(pd.DataFrame({"a": [1], "b": [2]}), "a") == "b"
    at = open_build_page()
    assert at.text_area(key="build_user").value == "{{ body }}"
    at.radio(key="build_kind").set_value("Embeddings").run()
    assert at.selectbox(key="build_embed_column").value == "body"
