"""Redaction before the run: the studio's ``redact`` policy for sensitive data (issue 42
item 1). The engine reads placeholders; the job's input file stays as given; each output
line says what its request had replaced; what was replaced is kept only where asked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from core.check import checked, summary_lines
from core.check.engine_requests import ChatRequest, EngineRequest
from core.check.sensitive import redact, save_policy
from core.config import REPO_ROOT
from core.jobs.folder import JobFolder, create_job
from core.jobs.submit import Refused, Submission, submit
from core.run import worker
from core.run.outputs import Choice, Completion
from core.run.retry import result_line
from core.schemas import EngineConfig, RaySettings
from tests.support.jobs import StandIn

HELD = REPO_ROOT / "tests" / "sensitive"


def test_each_item_becomes_a_numbered_placeholder_one_per_value():
    texts = [
        "Write to jane.doe@example.com or bob@example.org, or call (415) 555-0132.",
        "Again: jane.doe@example.com. Card 4242 4242 4242 4242.",
    ]
    out, items = redact(texts, "US")
    assert out == [
        "Write to [EMAIL_1] or [EMAIL_2], or call [PHONE_1].",
        "Again: [EMAIL_1]. Card [CARD_1].",
    ]
    assert items == [
        ("[EMAIL_1]", "email", "jane.doe@example.com"),
        ("[EMAIL_2]", "email", "bob@example.org"),
        ("[PHONE_1]", "phone", "(415) 555-0132"),
        ("[CARD_1]", "card", "4242 4242 4242 4242"),
    ]
    plain = ["Order 123456789 shipped on 2024-05-12, 3 items for 19.99."]
    assert redact(plain, "US") == (plain, [])  # nothing found: untouched


class Echo(StandIn):
    """Stands in for the engine: answers each chat with the text it was given to read."""

    def __init__(self) -> None:
        self.seen: list[EngineRequest] = []

    def run(self, requests: list[EngineRequest]):
        self.seen += requests
        lines = []
        for request in requests:
            read = " | ".join(
                m["content"] for m in request.messages
            ) if isinstance(request, ChatRequest) else request.prompt  # fmt: skip
            lines.append(result_line(request, "tiny", Completion(5, [Choice(read, "stop", 3)])))
        yield lines


def _run(tmp_path: Path, monkeypatch, keep: bool) -> tuple[JobFolder, Echo, bytes]:
    batch = tmp_path / "planted.jsonl"
    shutil.copyfile(HELD / "planted.jsonl", batch)
    job = create_job(
        batch, tmp_path / "jobs", EngineConfig(model="/models/tiny"), redact=True,
        keep_redactions=keep,
    )  # fmt: skip
    given = job.input.read_bytes()
    engine = Echo()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: engine)
    assert worker.run_job(job).state == "completed"
    return job, engine, given


def _answers(job: JobFolder) -> dict[str, dict[str, Any]]:
    return {
        line["custom_id"]: line
        for line in map(json.loads, job.output.read_text(encoding="utf-8").splitlines())
    }


def test_the_engine_reads_placeholders_and_each_line_says_what_was_replaced(
    tmp_path: Path, monkeypatch
):
    job, engine, given = _run(tmp_path, monkeypatch, keep=False)
    read = " ".join(
        m["content"] for r in engine.seen if isinstance(r, ChatRequest) for m in r.messages
    )
    read += " ".join(r.prompt for r in engine.seen if not isinstance(r, ChatRequest))
    for value in ("jane.doe@example.com", "555-0132", "4242 4242 4242 4242", "GB82 WEST",
                  "203.0.113.7", "AKIAIOSFODNN7EXAMPLE", "ghp_1234567890"):  # fmt: skip
        assert value not in read
    answers = _answers(job)
    text = answers["r0"]["response"]["body"]["choices"][0]["message"]["content"]
    assert text == "Summarise: the customer writes from [EMAIL_1] about a refund."
    assert answers["r0"]["redacted"] == {"email": 1}
    assert answers["r2"]["redacted"] == {"card": 1}
    assert "redacted" not in answers["r6"]  # plain prose: nothing replaced, nothing said
    assert "Order 123456789 shipped" in answers["r6"]["response"]["body"]["choices"][0][
        "message"]["content"]  # fmt: skip
    # The truth stays as given: the job's copy of the input and the user's file.
    assert job.input.read_bytes() == given == (HELD / "planted.jsonl").read_bytes()
    assert not job.redactions_file.exists()  # not asked to keep them: kept nowhere


def test_what_was_replaced_is_kept_in_the_job_only_when_asked(tmp_path: Path, monkeypatch):
    job, _, _ = _run(tmp_path, monkeypatch, keep=True)
    kept = json.loads(job.redactions_file.read_text(encoding="utf-8"))
    assert kept["r0"] == [
        {"placeholder": "[EMAIL_1]", "kind": "email", "value": "jane.doe@example.com"}
    ]
    assert "r6" not in kept


def test_submit_records_the_policy_and_a_ray_job_is_refused_under_it(
    studio_home: Path, monkeypatch
):
    studio_home.mkdir(parents=True)
    save_policy(studio_home, "redact")
    report = checked(HELD / "planted.jsonl")
    assert report.ok  # listed, not refused
    assert "sensitive data: redacted before the run (the engine reads placeholders)" in (
        summary_lines(report)
    )
    monkeypatch.setattr("core.jobs.submit.start_worker", lambda job, **kw: None)
    model = EngineConfig(model=str(studio_home / "no-such-model"))
    settings = Submission(engine=model, keep_redactions=True)
    monkeypatch.setattr("core.jobs.submit.settings_problems", lambda submission, gpus=None: [])
    spec = submit(HELD / "planted.jsonl", settings).job.read_spec()
    assert spec.redact and spec.keep_redactions
    ray = RaySettings(address="local")
    with pytest.raises(Refused) as refused:
        submit(HELD / "planted.jsonl", Submission(engine=model, ray=ray))
    assert any("redacts sensitive data" in p for p in refused.value.problems)
    save_policy(studio_home, "warn")
    assert not submit(HELD / "planted.jsonl", settings).job.read_spec().redact


def test_a_keys_own_policy_decides_for_its_batches_and_the_cli_sets_it(
    studio_home: Path, monkeypatch
):
    from core.api.keys import create_key
    from core.check.sensitive import read_policy
    from tests.support.cli import cli

    studio_home.mkdir(parents=True)
    create_key(studio_home, "alice")
    assert cli("keys", "sensitive", "alice").stdout.strip().endswith("applies: warn")
    set_to = cli("keys", "sensitive", "alice", "redact")
    assert set_to.returncode == 0 and "its batches' sensitive data: redact" in set_to.stdout
    assert cli("keys", "sensitive", "nobody", "redact").returncode != 0  # no such key
    assert read_policy(studio_home).owners == {"alice": "redact"}
    monkeypatch.setattr("core.jobs.submit.start_worker", lambda job, **kw: None)
    monkeypatch.setattr("core.jobs.submit.settings_problems", lambda submission, gpus=None: [])
    model = EngineConfig(model=str(studio_home / "no-such-model"))
    alices = submit(HELD / "planted.jsonl", Submission(engine=model, owner="alice"))
    assert alices.job.read_spec().redact  # her policy, though the studio's is warn
    bobs = submit(HELD / "planted.jsonl", Submission(engine=model, owner="bob"))
    assert not bobs.job.read_spec().redact
    save_policy(studio_home, "refuse")  # the studio's: alice keeps her own
    assert submit(HELD / "planted.jsonl", Submission(engine=model, owner="alice")).job
    with pytest.raises(Refused):
        submit(HELD / "planted.jsonl", Submission(engine=model, owner="bob"))
    cli("keys", "sensitive", "alice", "studio")
    assert read_policy(studio_home).owners == {}


def test_a_job_redacts_local_numbers_as_the_region_its_check_read_them(
    studio_home: Path, tmp_path: Path, monkeypatch
):
    """Submitted under the redact policy with the studio's region DE, the job keeps DE and
    its worker replaces a German number written without +49; a job made before there was
    a region (none in its job.json) reads them as US's."""
    from core.check.sensitive import save_phone_region

    studio_home.mkdir(parents=True)
    save_policy(studio_home, "redact")
    save_phone_region(studio_home, "DE")
    batch = tmp_path / "de.jsonl"
    body = {"model": "m", "messages": [{"role": "user", "content": "Ruf 030 12345678 an."}]}
    line = {"custom_id": "r0", "method": "POST", "url": "/v1/chat/completions", "body": body}
    batch.write_text(json.dumps(line) + "\n", encoding="utf-8")
    monkeypatch.setattr("core.jobs.submit.start_worker", lambda job, **kw: None)
    monkeypatch.setattr("core.jobs.submit.settings_problems", lambda submission, gpus=None: [])
    model = EngineConfig(model=str(studio_home / "no-such-model"))
    job = submit(batch, Submission(engine=model)).job
    assert job.read_spec().phone_region == "DE"
    save_phone_region(studio_home, "US")  # changed after: the job keeps what its check read
    engine = Echo()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: engine)
    assert worker.run_job(job).state == "completed"
    assert engine.seen[0].messages[0]["content"] == "Ruf [PHONE_1] an."
    assert _answers(job)["r0"]["redacted"] == {"phone": 1}
    # As a job written before the region was kept: read as US's, the number stays.
    old = create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/tiny"), redact=True)
    spec = json.loads(old.spec_file.read_text(encoding="utf-8"))
    del spec["phone_region"]
    old.spec_file.write_text(json.dumps(spec), encoding="utf-8")
    assert worker.run_job(old).state == "completed"
    assert engine.seen[-1].messages[0]["content"] == "Ruf 030 12345678 an."
