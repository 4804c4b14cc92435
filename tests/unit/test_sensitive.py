"""Sensitive data in prompts, found by the check before anything runs (issue 42 item 1)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from core.check import check_file, checked, summary_lines
from core.check.sensitive import (
    PolicyProblem,
    lines_worth_a_look,
    read_policy,
    save_policy,
    worth_a_look,
)
from core.config import REPO_ROOT
from core.jobs.submit import file_problems
from tests.support.cli import cli

HELD = REPO_ROOT / "tests" / "sensitive"
# Every kind at a known line of tests/sensitive/planted.jsonl (line 7 is plain prose).
PLANTED = {
    "email": [1],
    "phone": [2],
    "card": [3],
    "iban": [4],
    "ip": [5],
    "credential": [6, 8],
}
FULL_VALUES = [
    "jane.doe@example.com",
    "555-0132",
    "4242 4242 4242 4242",
    "GB82 WEST 1234 5698 7654 32",
    "203.0.113.7",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB",
]


def test_the_report_names_each_planted_kind_at_its_line():
    report = check_file(HELD / "planted.jsonl", sensitive="warn")
    found = report.sensitive
    assert {kind: [line for line, _ in items] for kind, items in found.listed.items()} == PLANTED
    assert found.found == {kind: len(lines) for kind, lines in PLANTED.items()}
    assert found.flagged_lines == 7
    assert report.ok  # warn: listed, and the file runs


def test_plain_prose_with_numbers_has_no_finding():
    report = check_file(HELD / "prose.jsonl", sensitive="warn")
    assert report.sensitive.found == {}
    assert "sensitive data: none found" in summary_lines(report)


def test_masked_output_never_holds_a_full_value():
    report = check_file(HELD / "planted.jsonl", sensitive="refuse")
    shown = "\n".join(
        [*summary_lines(report), *(p.message for p in report.problems), str(report.to_dict())]
    )
    assert "**** **** **** 4242" in shown and "j***@e***.com" in shown
    for value in FULL_VALUES:
        assert value not in shown, value


def test_refuse_policy_refuses_the_file_with_its_line_numbers():
    report = check_file(HELD / "planted.jsonl", sensitive="refuse")
    assert not report.ok
    problems = file_problems(report, skip_invalid=True)
    assert len(problems) == 1
    assert "lines 1, 2, 3, 4, 5, 6, 8" in problems[0]
    assert check_file(HELD / "prose.jsonl", sensitive="refuse").ok


def test_allow_policy_scans_nothing():
    report = check_file(HELD / "planted.jsonl", sensitive="allow")
    assert report.sensitive is None and report.ok


def test_the_studio_policy_is_what_every_check_keeps(studio_home: Path):
    studio_home.mkdir(parents=True)
    assert read_policy(studio_home).policy == "warn"
    warned = checked(HELD / "planted.jsonl")
    assert warned.ok
    save_policy(studio_home, "refuse")
    assert not check_file(HELD / "planted.jsonl").ok  # the default reads the studio's
    assert not checked(HELD / "planted.jsonl").ok  # a report kept from before is not reused


def test_core_check_refuses_with_the_lines_under_a_refuse_policy(studio_home: Path):
    studio_home.mkdir(parents=True)
    save_policy(studio_home, "refuse")
    result = cli("check", str(HELD / "planted.jsonl"), "--no-tokens")
    assert result.returncode != 0
    assert "remove it from lines 1, 2, 3, 4, 5, 6, 8" in result.stdout
    assert "payment card number: 1 on 1 lines (line 3 **** **** **** 4242)" in result.stdout
    assert "4242 4242 4242 4242" not in result.stdout


def test_a_bad_policy_is_refused_and_nothing_is_kept(studio_home: Path):
    studio_home.mkdir(parents=True)
    with pytest.raises(PolicyProblem, match="use one of allow, warn, refuse, redact"):
        save_policy(studio_home, "sometimes")
    assert not (studio_home / "sensitive.json").exists()
    (studio_home / "sensitive.json").write_text('{"policy": "sometimes"}')
    with pytest.raises(PolicyProblem):
        read_policy(studio_home)
    report = check_file(HELD / "planted.jsonl")  # scanned as warn, and the report says why
    assert report.sensitive.found and "unreadable" in report.problems[0].message


def test_a_split_check_keeps_the_findings_of_every_part(tmp_path: Path):
    lines = (HELD / "planted.jsonl").read_bytes().splitlines(keepends=True)
    big = tmp_path / "big.jsonl"
    big.write_bytes(
        b"".join(line.replace(b'"r', f'"p{k}-r'.encode()) for k in range(2) for line in lines)
    )
    report = check_file(big, sensitive="warn", processes=2)
    assert report.processes == 2
    assert [line for line, _ in report.sensitive.listed["credential"]] == [6, 8, 14, 16]


def test_the_batch_api_fails_such_a_batch_naming_the_lines(studio_home: Path):
    import openai
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from core.api.keys import create_key
    from core.api.routes import api_routes
    from core.config import data_paths

    key = create_key(data_paths().home, "alice")
    save_policy(data_paths().home, "refuse")
    with TestClient(Starlette(routes=api_routes()), base_url="http://testserver") as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=http)
        # The chat lines only: a batch has one endpoint.
        chat_lines = (HELD / "planted.jsonl").read_bytes().splitlines(keepends=True)[:7]
        file = client.files.create(file=("t.jsonl", b"".join(chat_lines)), purpose="batch")
        batch = client.batches.create(
            input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert batch.status == "failed"
    messages = [e.message for e in batch.errors.data]
    assert any("lines 1, 2, 3, 4, 5, 6" in m and "payment card" in m for m in messages)
    assert not any("4242 4242" in m for m in messages)


def test_the_refusal_is_kept_beyond_the_listed_problems(tmp_path: Path):
    """A file with more problems than the report lists is still refused for its data."""
    planted = (HELD / "planted.jsonl").read_bytes().splitlines(keepends=True)[0]
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"not json\n" * 10_001 + planted)
    report = check_file(big, sensitive="refuse", count_tokens=False)
    assert report.problems_dropped > 0
    assert not report.ok
    assert "remove it from lines 10002" in file_problems(report, skip_invalid=True)[0]


def test_the_prefilter_over_a_batch_picks_the_lines_the_line_rule_picks():
    """The check runs the prefilter over its batches of lines: it must pick exactly the
    lines that the rule for one line picks, at the ends of lines and across them too."""
    rng = random.Random(42)
    alphabet = "0123456789 .()/+-_:@xyzAKISGaeyJBEGIN\u00e9\r"
    made = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    edges = [
        "ends with 123",
        "4567 starts the line",  # with the line before: a run of 7 across the newline
        "1-2-3-4",
        "123456",
        "10.0.0.1",
        "1.2.3",
        "fe80::1",
        "a:b",
        "x_" + "a" * 20,
        "x_" + "a" * 19,
        "-" + "Z9" * 10,
        "-----BEGIN KEY",
        "AKIA",
        "AIz",
        "a.eyJ",
        "SG.",
        "",
        "plain prose",
    ]
    held = [line for path in HELD.iterdir() for line in path.read_bytes().splitlines()]
    raws = [*held, *(line.encode() for line in [*edges, *made])]
    for start in range(0, len(raws), 700):
        part = raws[start : start + 700]
        expected = [k for k, raw in enumerate(part) if worth_a_look(raw)]
        assert lines_worth_a_look(part) == expected
    assert 0 < len([raw for raw in raws if worth_a_look(raw)]) < len(raws)
