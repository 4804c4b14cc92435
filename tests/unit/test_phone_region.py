"""The region phone numbers written without a +country code are read as: the studio's,
kept beside its policy for sensitive data, and taken by every scan (issue 42 item 1,
phone region)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.check import check_file, checked, summary_lines
from core.check.sensitive import (
    POLICY_FILE,
    PolicyProblem,
    find,
    read_policy,
    save_phone_region,
    save_policy,
)
from tests.support.cli import cli

BERLIN = "Ruf mich unter 030 12345678 an, bitte."  # a German number, written locally
NEW_YORK = "Call me at (212) 555-0132, please."  # a US number, written locally


def _batch(path: Path, texts: list[str]) -> Path:
    lines = [
        {
            "custom_id": f"r{k}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": text}]},
        }
        for k, text in enumerate(texts)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_a_local_number_is_read_by_the_region_given():
    assert find(BERLIN, "DE") == (("phone", "030 12345678"),)
    assert find(BERLIN, "US") == ()
    assert find(NEW_YORK, "US") == (("phone", "(212) 555-0132"),)
    assert find(NEW_YORK, "DE") == ()
    # A number with its +country code is read by its own, whatever the region.
    assert find("Ruf +49 30 12345678 an.", "US") == (("phone", "+49 30 12345678"),)


def test_core_check_reads_local_numbers_as_the_studios_region(studio_home: Path, tmp_path):
    studio_home.mkdir(parents=True)
    batch = _batch(tmp_path / "b.jsonl", ["Hallo.", BERLIN])
    default = cli("check", str(batch), "--no-tokens")  # a studio that never set one: US
    assert "sensitive data: none found" in default.stdout
    assert "are read as in US (United States)" in default.stdout
    assert checked(batch).sensitive.found == {}  # kept for this file, as a page keeps it
    save_phone_region(studio_home, "de")
    assert read_policy(studio_home).phone_region == "DE"
    assert checked(batch).sensitive.found == {"phone": 1}  # a new region checks again
    result = cli("check", str(batch), "--no-tokens")
    assert result.returncode == 0, result.stdout
    assert "sensitive data: phone number: 1 on 1 lines (line 2 *** ******78)" in result.stdout
    assert (
        "sensitive data: phone numbers without a +country code are read as in DE (Germany) "
        "(Settings, Sensitive data)"
    ) in result.stdout
    assert "030 12345678" not in result.stdout


def test_the_parallel_check_reads_them_as_the_studios_region_in_every_part(
    studio_home: Path, tmp_path: Path
):
    studio_home.mkdir(parents=True)
    batch = _batch(tmp_path / "big.jsonl", [*["Hallo."] * 300, NEW_YORK, *["Hallo."] * 298, BERLIN])
    us = check_file(batch, sensitive="warn", processes=2)
    assert us.processes == 2  # the second half was a helper process's
    assert [line for line, _ in us.sensitive.listed["phone"]] == [301]
    save_phone_region(studio_home, "DE")
    de = check_file(batch, sensitive="warn", processes=2)
    assert de.processes == 2
    assert [line for line, _ in de.sensitive.listed["phone"]] == [600]  # the helper's part
    assert de.sensitive.region == "DE"
    # Given by the caller, it is the one kept, the studio's aside.
    assert check_file(batch, sensitive="warn", processes=2, phone_region="US").sensitive.listed[
        "phone"
    ] == [(301, "(***) ***-**32")]


def test_an_unknown_region_is_refused_naming_it_and_nothing_is_kept(studio_home: Path):
    studio_home.mkdir(parents=True)
    save_policy(studio_home, "refuse")
    before = (studio_home / POLICY_FILE).read_bytes()
    for wrong in ("XX", "Germany", "", "DEU"):
        with pytest.raises(PolicyProblem, match=f"{wrong!r} is not a region"):
            save_phone_region(studio_home, wrong)
    assert (studio_home / POLICY_FILE).read_bytes() == before
    kept = read_policy(studio_home)
    assert (kept.policy, kept.phone_region) == ("refuse", "US")
    # Saving the policy keeps the region, and the region keeps the policy and owners.
    save_phone_region(studio_home, "FR")
    save_policy(studio_home, "redact", owner="alice")
    save_policy(studio_home, "warn")
    kept = read_policy(studio_home)
    assert (kept.policy, kept.owners, kept.phone_region) == ("warn", {"alice": "redact"}, "FR")


def test_a_region_edited_by_hand_is_named_and_the_check_says_so(studio_home: Path, tmp_path):
    studio_home.mkdir(parents=True)
    (studio_home / POLICY_FILE).write_text('{"policy": "refuse", "phone_region": "ZZ"}')
    with pytest.raises(PolicyProblem, match="'ZZ' is not a region"):
        read_policy(studio_home)
    report = check_file(_batch(tmp_path / "b.jsonl", [NEW_YORK]))
    assert "unreadable" in report.problems[0].message and "'ZZ'" in report.problems[0].message
    assert report.sensitive.region == "US" and report.sensitive.found == {"phone": 1}
    assert report.ok  # scanned as warn: nothing refused
    assert any("are read as in US" in line for line in summary_lines(report))


def test_the_batch_api_validates_with_the_studios_region(
    studio_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import openai
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from core.api.keys import create_key
    from core.api.routes import api_routes

    monkeypatch.setattr("core.jobs.submit.start_worker", lambda job, **kw: None)
    studio_home.mkdir(parents=True)
    key = create_key(studio_home, "alice")
    save_policy(studio_home, "refuse")
    content = _batch(tmp_path / "b.jsonl", ["Hallo.", BERLIN]).read_bytes()
    errors = {}
    with TestClient(Starlette(routes=api_routes()), base_url="http://testserver") as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=http)
        for region in ("US", "DE"):
            save_phone_region(studio_home, region)
            file = client.files.create(file=("t.jsonl", content), purpose="batch")
            batch = client.batches.create(
                input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            errors[region] = [e.message for e in batch.errors.data] if batch.errors else []
    assert not any("sensitive data" in m for m in errors["US"]), errors  # no number read
    assert any("1 phone number" in m and "lines 2" in m for m in errors["DE"]), errors


def test_core_sensitive_shows_and_sets_the_studios_policy_and_region(
    studio_home: Path, tmp_path: Path
):
    """The command Settings has beside it: the same rule (``save_studio``), and the check
    then reads local numbers by the region it set (issue 42)."""
    shown = cli("sensitive")  # never set: the defaults, and nothing written
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "sensitive data: warn (the studio's policy)",
        "phone numbers without a +country code are read as in US (United States)",
    ]
    assert not (studio_home / POLICY_FILE).exists()
    batch = _batch(tmp_path / "b.jsonl", ["Hallo.", BERLIN])
    assert checked(batch).sensitive.found == {}  # US: 030 12345678 is no number
    save_policy(studio_home, "redact", owner="alice")
    set_to = cli("sensitive", "refuse", "--region", "de")
    assert set_to.returncode == 0, set_to.stderr
    assert set_to.stdout.splitlines() == [
        "sensitive data: refuse (the studio's policy; owners' own: alice = redact)",
        "phone numbers without a +country code are read as in DE (Germany)",
    ]
    kept = read_policy(studio_home)
    assert (kept.policy, kept.owners, kept.phone_region) == ("refuse", {"alice": "redact"}, "DE")
    assert cli("sensitive").stdout == set_to.stdout  # shown as set
    report = checked(batch)
    assert report.sensitive.found == {"phone": 1} and report.sensitive.region == "DE"
    assert not report.ok  # refused, by the policy it set
    # Either alone keeps the other.
    assert cli("sensitive", "--region", "US").returncode == 0
    assert cli("sensitive", "warn").returncode == 0
    kept = read_policy(studio_home)
    assert (kept.policy, kept.phone_region) == ("warn", "US")
    assert checked(batch).sensitive.found == {}


def test_core_sensitive_refuses_a_bad_policy_or_region_and_keeps_nothing(studio_home: Path):
    studio_home.mkdir(parents=True)
    cli("sensitive", "refuse", "--region", "FR")
    before = (studio_home / POLICY_FILE).read_bytes()
    for args, named in (
        (("sometimes",), "'sometimes' is not a policy for sensitive data"),
        (("redact", "--region", "XX"), "'XX' is not a region"),  # the policy is not kept
        (("sometimes", "--region", "DE"), "'sometimes' is not a policy"),  # nor the region
        (("--region", "Germany"), "'Germany' is not a region"),
    ):
        result = cli("sensitive", *args)
        assert result.returncode == 2, (args, result)
        assert result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # one line
        assert result.stderr.startswith(f"error: {named}") and "nothing was saved" in result.stderr
        assert (studio_home / POLICY_FILE).read_bytes() == before
