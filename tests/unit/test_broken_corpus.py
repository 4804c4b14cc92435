"""The corpus of broken batch files in tests/broken/: each fault gets its line-numbered
message, in the check, on the command line and on the page, and never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.check import check_file
from core.cli.main import main
from core.config import default_model_dir
from tests.support.broken_corpus import BROKEN, EXPECTED, WITH_MODEL, assert_expected
from tests.support.cli import cli

MODEL = default_model_dir()


def found(problems: list) -> list[tuple[int, str, str]]:
    return [(p.line, p.severity, p.message) for p in problems]


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
    result = cli("check", str(ten_megabyte_line))
    assert "Traceback" not in result.stdout + result.stderr
    assert result.returncode == 1
    assert "line 1: error: the prompt has at least" in result.stdout
    assert "the model's context is 8,192: shorten it" in result.stdout
