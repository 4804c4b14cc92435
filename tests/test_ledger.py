"""Reconciliation, verification and reruns, read from job folders (no engine)."""

import json

from core.jobs.ledger import combined_lines, read_ledger, reconcile, verify, write_rerun_file
from core.jobs.output_file import OutputWriter
from core.run.outputs import error_line
from tests.conftest import run_cli
from tests.factories import finished_job


def test_reconcile_counts_missing_and_groups_failures(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": None, "c": None, "d": "no"})
    lines = job.output.read_bytes().splitlines(keepends=True)
    job.output.write_bytes(lines[0])  # "d" lost its result
    report = reconcile(job)
    assert (report.requests, report.succeeded, report.failed) == (4, 1, 2)
    assert report.missing == ["d"]
    assert report.failures_by_class == {"engine_rejected: prompt too long": 2}
    assert not report.complete


def test_a_success_after_a_failure_is_the_final_result(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": None})
    other = finished_job(tmp_path / "retry", {"b": "fixed"})
    with OutputWriter(job.output) as writer:
        writer.write([json.loads(other.output.read_text().splitlines()[0])])
    ledger = read_ledger(job)
    assert ledger.succeeded == {"a", "b"} and ledger.failed == {}
    finals = {line["custom_id"]: line for line in combined_lines(job)}
    assert finals["b"]["error"] is None
    assert reconcile(job).complete


def test_invalid_input_is_never_retried_but_engine_failures_are(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": None})
    with OutputWriter(job.errors) as writer:
        writer.write([error_line("c", "invalid_request", "line 3: bad")])
    job.input.write_text(job.input.read_text() + '{"custom_id": "c"}\n')
    assert read_ledger(job).retryable() == ["b"]
    rerun = tmp_path / "rerun.jsonl"
    assert write_rerun_file(job, ["b"], rerun) == 1
    assert json.loads(rerun.read_text())["custom_id"] == "b"


def test_verify_proves_untampered_and_complete_results(studio_home, tmp_path):
    job = finished_job(studio_home, {"a": "yes", "b": None, "c": "ok"})
    assert verify(job).ok
    result = run_cli("verify", job.job_id)
    assert result.returncode == 0 and "hash chains intact" in result.stdout


def test_verify_catches_an_edited_answer(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": "no"})
    job.output.write_bytes(job.output.read_bytes().replace(b'"yes"', b'"YES"'))
    result = verify(job)
    assert not result.ok
    assert "output.jsonl line 1: hash chain broken" in result.problems[0]


def test_verify_catches_a_removed_line(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": "no", "c": "maybe"})
    lines = job.output.read_bytes().splitlines(keepends=True)
    job.output.write_bytes(lines[0] + lines[2])
    problems = verify(job).problems
    assert any("line 2: hash chain broken" in p for p in problems)
    assert any("1 requests have no result, e.g. b" in p for p in problems)


def test_reconcile_cli_writes_the_rerun_file(studio_home, tmp_path):
    job = finished_job(studio_home, {"a": "yes", "b": None})
    rerun = tmp_path / "rerun.jsonl"
    result = run_cli("reconcile", job.job_id, "--write-rerun", str(rerun))
    assert result.returncode == 0
    assert "2 requests, 1 succeeded, 1 failed" in result.stdout
    assert "1 x engine_rejected: prompt too long" in result.stdout
    assert [json.loads(x)["custom_id"] for x in rerun.read_text().splitlines()] == ["b"]
