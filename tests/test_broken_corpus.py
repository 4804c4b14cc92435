"""The corpus of broken batch files in tests/broken/: each fault gets its line-numbered
message, in the check, on the command line and on the page, and never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.check import check_file
from core.cli.main import main
from core.config import REPO_ROOT, default_model_dir
from tests.support.cli import run_cli

BROKEN = Path(__file__).parent / "broken"
MODEL = default_model_dir()

# file -> (lines, valid, [(line, severity, part of the message), ...])
EXPECTED: dict[str, tuple[int, int, list[tuple[int, str, str]]]] = {
    "not_json.jsonl": (4, 1, [
        (2, "error", "not valid JSON: Unterminated string starting at column 187 (the line "
                     "ends early"),
        (3, "error", "Extra data at column 206 (more than one JSON value on the line"),
        (4, "error", "(JSON needs double quotes around names and strings)"),
    ]),
    "not_utf8.jsonl": (2, 1, [
        (2, "error", "not UTF-8: byte 0xe9 at offset 146 (file byte 351); save the file as UTF-8"),
    ]),
    "bom_crlf.jsonl": (2, 2, [
        (0, "note", "starts with a UTF-8 byte order mark (BOM); it is ignored"),
        (0, "note", "Windows line endings (CRLF); they are accepted"),
    ]),
    "control_characters.jsonl": (3, 1, [
        (2, "error", "control character NUL (byte 0x00) at offset 161; remove it, or write it "
                     "as \\u0000 inside a string"),
        (3, "error", "control character U+0007 (byte 0x07) at offset 19"),
    ]),
    "custom_ids.jsonl": (9, 2, [
        (1, "error", "custom_id is missing; give each line a unique string id"),
        (2, "error", "custom_id is empty"),
        (3, "error", "custom_id is empty"),
        (4, "error", 'custom_id must be a string, got int (write it as a string: "17")'),
        (5, "error", "custom_id must be a string, got float"),
        (6, "error", "custom_id is missing"),
        (9, "error", "custom_id 'dup' repeats line 7; ids must be unique"),
    ]),
    "envelope.jsonl": (10, 3, [
        (1, "error", "method must be 'POST', got 'GET'"),
        (2, "error", "url '/v1/moderations' is not served; use /v1/chat/completions, "
                     "/v1/completions, /v1/responses, /v1/embeddings"),
        (3, "error", "url is missing"),
        (4, "error", "body is missing or not a JSON object"),
        (5, "error", "body.model is missing"),
        (6, "error", "body.model is missing"),
        (7, "warning", "extra_field is not a field of a batch line; it is ignored"),
        (10, "error", "body.input is missing"),
    ]),
    "messages.jsonl": (10, 1, [
        (1, "error", "body.messages must be a non-empty list of messages"),
        (2, "error", "body.messages must be a non-empty list of messages"),
        (3, "error", "messages[0].role is 'robot'; use one of system, developer, user, assistant"),
        (4, "error", "body.messages has no user message"),
        (5, "error", "ends with an assistant message; end with the user's turn"),
        (6, "error", "messages[0].content must be a string or a list of text parts, got int"),
        (7, "error", "messages[0].content has a 'image_url' part; the model reads text only"),
        (8, "error", "messages[0] (user) has no content"),
        (9, "error", "messages[0].tool_call_id is missing; name the call answered"),
        (10, "warning", "messages[2] is a system message after the conversation started"),
    ]),
    "parameters.jsonl": (9, 0, [
        (1, "error", "body.stream must be false or absent"),
        (2, "error", "body.temperature must be in [0, 2], got 2.5"),
        (3, "error", "body.top_p must be in (0, 1], got 0"),
        (4, "error", "body.top_p must be in (0, 1], got 1.5"),
        (5, "error", "body.max_tokens must be at least 1, got 0"),
        (6, "error", "body.n must be at least 1 and at most 16, got 0"),
        (7, "error", "body.temperature must be a number, got 'hot'"),
        (8, "error", "body.max_tokens must be an integer, got True"),
        (9, "error", "body.tool_choice.function.name 'g' names no tool; the tools are"),
    ]),
    "unknown_fields.jsonl": (2, 2, [
        (1, "warning", "body.frobnicate is not a field the engine knows; it is ignored"),
        (1, "warning", "body.temprature is not a field the engine knows; it is ignored"),
    ]),
    "max_output_missing.jsonl": (2, 2, [
        (0, "note", "1 line sets no max output tokens; the job default max_tokens=256 applies "
                    "(lines 1)"),
    ]),
    "json_array.jsonl": (32, 0, [
        (1, "error", "the file looks like a JSON array: write one JSON object per line"),
    ]),
    "json_array_one_line.jsonl": (1, 0, [
        (1, "error", "a line must be a JSON object, got an array (the file looks like a JSON "
                     "array"),
    ]),
    "not_objects.jsonl": (5, 1, [
        (1, "error", "a line must be a JSON object, got a string"),
        (2, "error", "a line must be a JSON object, got a number"),
        (3, "error", "a line must be a JSON object, got null"),
        (4, "error", "a line must be a JSON object, got a boolean"),
    ]),
    "trailing_blank_lines.jsonl": (2, 2, []),
    "only_blank_lines.jsonl": (0, 0, [
        (0, "error", "the file has no request lines (it is empty or blank)"),
    ]),
    "empty.jsonl": (0, 0, [(0, "error", "the file has no request lines (it is empty or blank)")]),
}  # fmt: skip
# Found only with the model's tokenizer (prompt + max output against its context).
WITH_MODEL = {
    "context_overflow.jsonl": (3, 2, [
        (1, "warning", "exceeds the context of 8,192 by"),
        (2, "error", "tokens; the model's context is 8,192: shorten it by at least"),
    ]),
}  # fmt: skip


def found(problems: list) -> list[tuple[int, str, str]]:
    return [(p.line, p.severity, p.message) for p in problems]


def assert_expected(
    problems: list[tuple[int, str, str]], expected: list[tuple[int, str, str]]
) -> None:
    for line, severity, part in expected:
        assert any((line, severity) == (p[0], p[1]) and part in p[2] for p in problems), (
            f"no {severity} on line {line} containing {part!r} in {problems}"
        )


def test_the_corpus_covers_every_file() -> None:
    assert {p.name for p in BROKEN.glob("*.jsonl")} == set(EXPECTED) | set(WITH_MODEL)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_broken_file_gets_its_line_numbered_messages(name: str) -> None:
    lines, valid, expected = EXPECTED[name]
    report = check_file(BROKEN / name)
    assert (report.lines, report.valid) == (lines, valid)
    assert_expected(found(report.problems), expected)


def test_lines_beyond_the_context_are_flagged_with_the_models_tokenizer(default_model) -> None:
    lines, valid, expected = WITH_MODEL["context_overflow.jsonl"]
    report = check_file(BROKEN / "context_overflow.jsonl", model_folder=MODEL)
    assert (report.lines, report.valid, report.over_context) == (lines, valid, 2)
    assert_expected(found(report.problems), expected)


VALID_FILES = {
    "bom_crlf.jsonl",
    "trailing_blank_lines.jsonl",
    "unknown_fields.jsonl",
    "max_output_missing.jsonl",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_cli_prints_the_same_messages(name: str, capsys: pytest.CaptureFixture) -> None:
    _lines, _valid, expected = EXPECTED[name]
    code = main(["check", str(BROKEN / name), "--no-tokens"])
    out = capsys.readouterr().out
    assert code == (0 if name in VALID_FILES else 1)
    for line, severity, part in expected:
        where = f"line {line}" if line else "file"
        assert any(f"{where}: {severity}: " in row and part in row for row in out.splitlines())
    main(["check", str(BROKEN / name), "--no-tokens", "--json"])
    report = json.loads(capsys.readouterr().out)
    problems = [(p["line"], p["severity"], p["message"]) for p in report["problems"]]
    assert_expected(problems, expected)


@pytest.fixture
def ten_megabyte_line(tmp_path: Path) -> Path:
    words = ["the", "parcel", "arrived", "damaged", "refund", "for", "order", "12345", "late"]
    content = " ".join(words[i % len(words)] for i in range(1_900_000))
    body = {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 8}
    line = {"custom_id": "huge", "method": "POST", "url": "/v1/chat/completions", "body": body}
    path = tmp_path / "ten_mb_line.jsonl"
    path.write_text(json.dumps(line))  # no final newline either
    assert path.stat().st_size > 10_000_000
    return path


def test_a_ten_megabyte_line_is_checked_without_a_traceback(
    ten_megabyte_line: Path, default_model: Path
) -> None:
    assert check_file(ten_megabyte_line).valid == 1  # well-formed: only the model can refuse it
    result = run_cli("check", str(ten_megabyte_line), timeout=120)
    assert "Traceback" not in result.stdout + result.stderr
    assert result.returncode == 1
    assert "line 1: error: the prompt has at least" in result.stdout
    assert "the model's context is 8,192: shorten it" in result.stdout


# -- the page --------------------------------------------------------------------------------


@pytest.fixture
def page(studio_home: Path) -> AppTest:
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/upload.py").run()
    at.radio(key="source").set_value("A file on the server").run()
    return at


def test_the_page_shows_each_files_messages_without_a_traceback(page: AppTest) -> None:
    for name, (lines, valid, expected) in {**EXPECTED, **WITH_MODEL}.items():
        page.text_input(key="server_path").set_value(str(BROKEN / name)).run()
        assert not page.exception, (name, [e.message for e in page.exception])
        metrics = {m.label: m.value for m in page.metric}
        assert (metrics["Lines"], metrics["Valid"]) == (str(lines), str(valid)), name
        if not expected:
            continue
        table = next(d.value for d in page.dataframe if "message" in d.value.columns)
        rows = list(zip(table["line"], table["severity"], table["message"], strict=True))
        assert_expected(rows, expected)
