"""Building a batch file from a table: the builder, the CLI command and the Build page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from core.check import check_file
from core.plan.builder import (
    BuildError,
    BuildSpec,
    build_file,
    default_user_template,
    dry_run,
    preview,
    read_table,
)
from core.plan.embed_builder import EmbedSpec
from tests.support.builder import TICKETS
from tests.support.cli import cli

SPEC = BuildSpec(
    user_template="Subject: {{ subject }}\n\n{{ body }}",
    system_prompt="Summarise the {{ channel }} ticket in one sentence.",
    id_column="ticket_id",
    task="ticket-summary",
    prompt_version="v2",
    job_id="job-7",
    params={"max_tokens": 48, "temperature": 0},
)


def test_a_table_becomes_checked_lines_with_stable_ids_and_metadata(tmp_path: Path) -> None:
    result = build_file(read_table(TICKETS), SPEC, tmp_path / "out.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert (result.rows, result.written) == (40, 39)
    first = lines[0]
    assert first["custom_id"] == "ticket-summary:T-2001"
    assert first["body"]["metadata"] == {
        "task": "ticket-summary",
        "source_id": "T-2001",
        "prompt_version": "v2",
        "job_id": "job-7",
    }
    assert first["body"]["messages"][0]["content"].startswith("Summarise the email ticket")
    assert first["body"]["messages"][1]["content"].startswith("Subject: Charged twice")
    assert first["body"]["max_tokens"] == 48
    assert check_file(tmp_path / "out.jsonl").ok


def test_empty_cells_are_reported_by_row_and_left_out() -> None:
    result = preview(read_table(TICKETS), SPEC, rows=40)
    assert [str(p) for p in result.problems] == [
        "row 16: error: empty cell in 'body'; row left out"
    ]
    kept = preview(read_table(TICKETS), BuildSpec(**{**SPEC.__dict__, "skip_empty": False}), 40)
    assert kept.written == 40 and kept.problems[0].severity == "warning"


def test_missing_columns_and_template_errors_are_named() -> None:
    table = read_table(TICKETS)
    with pytest.raises(BuildError, match="'priority', which the table does not have"):
        preview(table, BuildSpec(user_template="{{ priority }}: {{ body }}"))
    with pytest.raises(BuildError, match="user template line 2"):
        preview(table, BuildSpec(user_template="ok\n{% if subject %}"))
    with pytest.raises(BuildError, match="id column 'nope' is not in the table"):
        preview(table, BuildSpec(user_template="{{ body }}", id_column="nope"))


def test_row_errors_and_repeated_ids_are_reported_by_row() -> None:
    table = pd.DataFrame({"id": ["a", "a", "b"], "n": ["1", "2", "0"]})
    result = preview(table, BuildSpec(user_template="{{ n }}", id_column="id"), rows=3)
    assert (
        str(result.problems[0]) == "row 2: error: id 'a' repeats row 1; custom_ids must be unique"
    )
    assert result.written == 2
    divided = preview(table, BuildSpec(user_template="{{ 10 // (n | int) }}", id_column="id"), 3)
    assert str(divided.problems[-1]) == (
        "row 3: error: template error: ZeroDivisionError: integer division or modulo by zero"
    )


def test_row_numbers_are_ids_and_odd_column_names_work() -> None:
    table = pd.DataFrame({"review text": ["great", "bad"]})
    result = preview(table, BuildSpec(user_template="{{ row['review text'] }}", task="t"), 2)
    assert [line["custom_id"] for line in result.lines] == ["t:1", "t:2"]
    assert result.lines[1]["body"]["messages"] == [{"role": "user", "content": "bad"}]


def test_the_default_template_names_a_column_as_a_placeholder_or_through_row() -> None:
    assert default_user_template("subject") == "{{ subject }}"
    template = default_user_template("review text")
    assert template == "{{ row['review text'] }}"
    table = pd.DataFrame({"review text": ["great"]})
    assert preview(table, BuildSpec(user_template=template, task="t"), 1).lines[0]["body"][
        "messages"
    ] == [{"role": "user", "content": "great"}]


ODD_COLUMNS = ["name", "row", "self", "context", "loop", "true", "None", "if", "range",
               "review text", "a.b", "it's", 'say "hi"', "x}}y", "{{ z }}"]  # fmt: skip


def test_any_column_name_is_data_in_its_default_template_and_through_row() -> None:
    """A column named ``name`` or ``row`` once crashed the build (``render() got multiple
    values for argument 'name'``); a name is data, whatever it is."""
    table = pd.DataFrame({c: [f"{i}a", f"{i}b"] for i, c in enumerate(ODD_COLUMNS)})
    by_default = " ".join(default_user_template(column) for column in ODD_COLUMNS)
    through_row = " ".join(f"{{{{ row[{column!r}] }}}}" for column in ODD_COLUMNS)
    for template in (by_default, through_row):
        result = preview(table, BuildSpec(user_template=template, task="t"), rows=2)
        assert result.problems == [], template
        contents = [line["body"]["messages"][-1]["content"] for line in result.lines]
        assert contents == [
            " ".join(f"{i}{row}" for i in range(len(ODD_COLUMNS))) for row in "ab"
        ], template


def test_a_table_with_every_odd_column_name_builds_through_the_cli(tmp_path: Path) -> None:
    table = pd.DataFrame({column: [f"v{i}"] for i, column in enumerate(ODD_COLUMNS)})
    table.to_csv(tmp_path / "odd.csv", index=False)
    template = " ".join(default_user_template(column) for column in ODD_COLUMNS)
    out = tmp_path / "odd.jsonl"
    result = cli("build", str(tmp_path / "odd.csv"), "-o", str(out), "--user-template", template)
    assert result.returncode == 0, result.stderr
    line = json.loads(out.read_text())
    assert line["body"]["messages"] == [
        {"role": "user", "content": " ".join(f"v{i}" for i in range(len(ODD_COLUMNS)))}
    ]


def test_parquet_and_excel_tables_are_read(tmp_path: Path) -> None:
    table = read_table(TICKETS)
    table.to_parquet(tmp_path / "t.parquet")
    table.to_excel(tmp_path / "t.xlsx", index=False)
    for name in ("t.parquet", "t.xlsx"):
        assert len(read_table(tmp_path / name)) == 40
    with pytest.raises(BuildError, match=r"use a \.csv, \.parquet, \.xlsx file"):
        read_table(tmp_path / "t.txt")


def test_cli_build_writes_the_file_and_names_left_out_rows(tmp_path: Path) -> None:
    out = tmp_path / "built.jsonl"
    result = cli(
        "build", str(TICKETS), "-o", str(out), "--id-column", "ticket_id",
        "--task", "ticket-summary", "--user-template", "{{ subject }}: {{ body }}",
        "--max-tokens", "32",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "row 16: error: empty cell in 'body'" in result.stdout
    assert "39 of 40 rows written" in result.stdout
    assert len(out.read_text().splitlines()) == 39
    bad = cli("build", str(TICKETS), "-o", str(out), "--user-template", "{{ nope }}")
    assert bad.returncode == 1 and "'nope', which the table does not have" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        # 8e9 empty steps: past the bound on any CPU (two loops of 9000 once ended in time)
        ("{% for i in range(2000) %}{% for j in range(2000) %}{% for k in range(2000) %}"
         "{% endfor %}{% endfor %}{% endfor %}x", "ran for more than"),
        ("{{ 'a' * 10**9 }}", "a repetition would make 1,000,000,000 characters"),
        ("{% for i in range(9000) %}{{ text * 200 }}{% endfor %}",
         "makes more than 1,000,000 characters"),
        ("{{ range(10**7) | length }}", "range of 10,000,000 items"),
    ],
)  # fmt: skip
def test_a_runaway_template_is_stopped_on_each_row_as_that_rows_error(template, expected):
    table = pd.DataFrame({"text": ["hello", "world"], "id": ["a", "b"]})
    spec = BuildSpec(user_template="{{ text }} " + template, id_column="id")
    result = preview(table, spec, rows=2)  # 8e9 steps: it returns only if each row is stopped
    assert result.written == 0
    assert [p.row for p in result.problems] == [1, 2]
    assert all(expected in p.message for p in result.problems), result.problems


# n**3 empty Jinja steps: past the render bound at n=2000 on any CPU (8e9 steps), instant
# at n=1 or 2. Two nested loops at 9000 finished within the bound on a fast CPU.
RUNAWAY_LOOPS = (
    "{% for i in range(n) %}{% for j in range(n) %}{% for k in range(n) %}"
    "{% endfor %}{% endfor %}{% endfor %}"
)


def test_a_template_within_the_bounds_renders_every_row_after_a_stopped_one():
    table = pd.DataFrame({"n": [2000, 1, 2]})
    slow = RUNAWAY_LOOPS + "row {{ n }}"
    result = preview(table, BuildSpec(user_template=slow), rows=3)
    assert [p.row for p in result.problems] == [1]
    assert [line["body"]["messages"][-1]["content"] for line in result.lines] == ["row 1", "row 2"]


def test_a_template_too_slow_on_every_row_stops_the_build_after_three_rows(short_render_bound):
    table = pd.DataFrame({"n": [2000] * 1000})
    slow = RUNAWAY_LOOPS + "x"
    says = f"ran past {short_render_bound:g} s on 3 rows"  # not on a thousand
    with pytest.raises(BuildError, match=re.escape(says)):
        preview(table, BuildSpec(user_template=slow), rows=1000)


EMBED = EmbedSpec(column="body", id_column="ticket_id", task="tix")


def test_a_column_becomes_one_embeddings_line_per_row(tmp_path: Path) -> None:
    table = read_table(TICKETS)
    result = build_file(table, EMBED, tmp_path / "embed.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "embed.jsonl").read_text().splitlines()]
    assert (result.rows, result.written, result.line_count) == (40, 39, 39)
    assert [str(p) for p in result.problems] == [
        "row 16: error: empty cell in 'body'; row left out"
    ]
    first = lines[0]
    assert first == {
        "custom_id": "tix:T-2001",
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {
            "model": "text-embedding-3-small",
            "input": table["body"][0],
            "encoding_format": "float",
            "metadata": {"task": "tix", "source_id": "T-2001"},
        },
    }
    assert len({line["custom_id"] for line in lines}) == 39


def test_n_rows_per_line_make_list_inputs_with_ids_and_metadata_per_row() -> None:
    table = pd.DataFrame(
        {
            "id": ["a", "b", "c", "d", "e", "f", "g"],
            "text": ["one", "two", "", "four", 5, "six", "seven"],
            "tier": ["pro", "free", "pro", None, "free", "pro", "free"],
        }
    )
    spec = EmbedSpec(
        column="text",
        id_column="id",
        task="t",
        rows_per_line=3,
        encoding_format="base64",
        model="m",
        job_id="j1",
        metadata_columns=["tier"],
    )
    result = preview(table, spec, rows=10)
    assert (result.rows, result.written, result.line_count) == (7, 6, 2)
    assert [str(p) for p in result.problems] == ["row 3: error: empty cell in 'text'; row left out"]
    first, second = result.lines
    assert first["custom_id"] == "t:a..d"
    assert first["body"]["input"] == ["one", "two", "four"]
    assert first["body"]["encoding_format"] == "base64" and first["body"]["model"] == "m"
    assert first["body"]["metadata"] == {
        "task": "t",
        "source_ids": ["a", "b", "d"],
        "job_id": "j1",
        "tier": ["pro", "free", None],
    }
    assert second["custom_id"] == "t:e..g" and second["body"]["input"] == ["5", "six", "seven"]
    # The last line holds what is left, and a preview shows whole lines only.
    last = preview(table.head(5), spec, rows=10).lines[-1]
    assert last["custom_id"] == "t:e" and last["body"]["input"] == ["5"]
    one = preview(table, spec, rows=1)
    assert (one.rows, one.written, len(one.lines)) == (4, 3, 1)
    bare = preview(table, EmbedSpec(column="text", metadata=False), rows=1).lines[0]
    assert bare["custom_id"] == "embed:1" and "metadata" not in bare["body"]


def test_embeddings_rows_with_empty_or_repeated_ids_and_bad_specs_are_named() -> None:
    table = pd.DataFrame({"id": ["a", "a", None], "text": ["x", "y", "z"]})
    result = dry_run(table, EmbedSpec(column="text", id_column="id"))
    assert [str(p) for p in result.problems] == [
        "row 2: error: id 'a' repeats row 1; custom_ids must be unique",
        "row 3: error: the id column 'id' is empty",
    ]
    with pytest.raises(BuildError, match="column 'nope' is not in the table"):
        preview(table, EmbedSpec(column="nope"))
    with pytest.raises(BuildError, match="rows per line must be 1 to 2,048, not 0"):
        preview(table, EmbedSpec(column="text", rows_per_line=0))
    with pytest.raises(BuildError, match="metadata columns 'tier' are not in the table"):
        preview(table, EmbedSpec(column="text", metadata_columns=["tier"]))


def test_cli_builds_an_embeddings_batch(tmp_path: Path) -> None:
    out = tmp_path / "embed.jsonl"
    result = cli(
        "build", str(TICKETS), "-o", str(out), "--embed-column", "subject",
        "--id-column", "ticket_id", "--task", "subjects", "--rows-per-line", "8",
        "--metadata-column", "channel", "--encoding-format", "base64",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "40 of 40 rows written in 5 lines" in result.stdout
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [line["custom_id"] for line in lines][:2] == [
        "subjects:T-2001..T-2008",
        "subjects:T-2009..T-2016",
    ]
    assert lines[0]["body"]["input"][0] == "Charged twice this month"
    assert lines[0]["body"]["metadata"]["channel"][0] == "email"
    assert lines[0]["body"]["model"] == "text-embedding-3-small"
    bad = cli("build", str(TICKETS), "-o", str(out), "--embed-column", "nope")
    assert bad.returncode == 1 and "column 'nope' is not in the table" in bad.stderr


def test_build_file_refuses_to_overwrite_unless_asked(tmp_path: Path) -> None:
    from core.plan.builder import free_file_name

    table = read_table(TICKETS)
    out = tmp_path / "t.jsonl"
    out.write_text("keep me\n")
    with pytest.raises(BuildError, match=r"t\.jsonl exists already: save as t-2\.jsonl"):
        build_file(table, BuildSpec("{{ subject }}", id_column="ticket_id"), out)
    assert out.read_text() == "keep me\n"
    assert free_file_name(tmp_path, "t.jsonl") == "t-2.jsonl"
    build_file(table, BuildSpec("{{ subject }}", id_column="ticket_id"), out, replace=True)
    assert out.read_text() != "keep me\n"


def test_an_uploaded_table_is_kept_with_the_draft_per_user(tmp_path: Path) -> None:
    from core.files import file_sha256
    from core.plan.drafts import BuildDraft, load_draft, save_draft, save_table

    save_table("ana", "mine.csv", TICKETS.read_bytes(), tmp_path)
    save_draft("ana", BuildDraft(fields={"build_task": "t"}, table_name="mine.csv"), tmp_path)
    draft, (table, name, sha256) = load_draft("ana", tmp_path)
    assert draft.fields == {"build_task": "t"} and name == "mine.csv" and len(table) == 40
    assert sha256 == file_sha256(TICKETS)  # the bytes uploaded: the page tells tables apart
    assert load_draft("bo", tmp_path) == (BuildDraft(), None)  # one draft per user
    (tmp_path / "drafts" / "ana" / "build.json").write_text("{not json")
    assert load_draft("ana", tmp_path) == (BuildDraft(), None)  # a broken draft is none
