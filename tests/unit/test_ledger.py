"""Reconciliation, verification and reruns, read from job folders (no engine)."""

import json

import pytest

from core.config import REPO_ROOT, SAMPLE_DATA
from core.jobs.folder import JobFolder
from core.jobs.latest import standing_failures
from core.jobs.ledger import (
    LedgerReader,
    Shard,
    combined_lines,
    input_lines,
    read_ledger,
    reconcile,
    retryable_shards,
    summary,
    verify,
    write_combined,
    write_rerun_file,
)
from core.jobs.output_file import OutputWriter
from core.run.outputs import Choice, Completion, error_line, success_line
from tests.support.cli import cli
from tests.support.jobs import finished_job


def test_reconcile_counts_missing_and_groups_failures(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": None, "c": None, "d": "no"})
    lines = job.output.read_bytes().splitlines(keepends=True)
    job.output.write_bytes(lines[0])  # "d" lost its result
    report = reconcile(job)
    assert (report.requests, report.succeeded, report.failed) == (4, 1, 2)
    assert report.missing == ["d"]
    assert report.failures_by_class == {"engine_rejected: prompt too long": 2}
    assert not report.complete


def test_failures_group_by_class_without_their_line_numbers(tmp_path):
    """Issue 58, item 17: each invalid line's class carried its "line N:", one row a line."""
    job = finished_job(tmp_path, {"a": "yes", "b": None, "c": None})
    message = "body.temperature must be a number, got 'hot'"
    with OutputWriter(job.errors) as writer:
        writer.write(
            [
                error_line(cid, "invalid_request", f"line {n}: {message}", line=n)
                for n, cid in ((2, "b"), (3, "c"))
            ]
        )
    assert reconcile(job).failures_by_class == {f"invalid_request: {message}": 2}


def test_a_success_after_a_failure_is_the_final_result(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": None})
    other = finished_job(tmp_path / "retry", {"b": "fixed"})
    with OutputWriter(job.output) as writer:
        writer.write([json.loads(other.output.read_text().splitlines()[0])])
    ledger = read_ledger(job)
    assert ledger.succeeded == {"a", "b"} and ledger.failed == {}
    finals = {d["custom_id"]: d for d in map(json.loads, combined_lines(job))}
    assert finals["b"]["error"] is None
    assert reconcile(job).complete
    # The combined file: each final line byte for byte as the worker wrote it, input order.
    written = job.output.read_bytes().splitlines(keepends=True)  # a, then b's success
    assert write_combined(job, tmp_path / "all.jsonl") == (2, 0)
    assert (tmp_path / "all.jsonl").read_bytes() == b"".join(written)


def test_monitors_latest_failures_leave_out_those_a_retry_fixed(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": None, "c": None})
    assert [line["custom_id"] for line in standing_failures(job)] == ["b", "c"]
    other = finished_job(tmp_path / "retry", {"b": "fixed"})
    with OutputWriter(job.output) as writer:
        writer.write([json.loads(other.output.read_text().splitlines()[0])])
    assert [line["custom_id"] for line in standing_failures(job)] == ["c"]  # b succeeded


def test_a_request_that_failed_twice_keeps_its_latest_error(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": None})
    with OutputWriter(job.errors) as writer:
        writer.write([error_line("b", "engine_error", "the engine stopped")])
    finals = [json.loads(line) for line in combined_lines(job)]
    assert [d["custom_id"] for d in finals] == ["a", "b"]
    assert finals[1]["error"]["message"] == "the engine stopped"
    # The error file beside the combined one holds the failure's final line alone.
    counts = write_combined(job, tmp_path / "all.jsonl", tmp_path / "all.errors.jsonl")
    assert counts == (2, 1)
    errors = [json.loads(raw) for raw in (tmp_path / "all.errors.jsonl").read_bytes().splitlines()]
    assert [(d["custom_id"], d["error"]["message"]) for d in errors] == [
        ("b", "the engine stopped")
    ]


def test_invalid_input_is_never_retried_but_engine_failures_are(tmp_path):
    """An engine fault may pass on a retry; invalid input and a request the engine refused
    (a prompt beyond the context) fail the same way again (issue 30, item 5)."""
    rows = [
        {"custom_id": "a", "answer": "yes"},
        {"custom_id": "b", "answer": None, "error": ("engine_error", "the engine stopped")},
        {"custom_id": "d", "answer": None, "error": ("engine_rejected", "prompt too long")},
    ]
    job = finished_job(tmp_path, rows)
    with OutputWriter(job.errors) as writer:
        writer.write([error_line("c", "invalid_request", "line 4: bad")])
    job.input.write_text(job.input.read_text() + '{"custom_id": "c"}\n')
    assert read_ledger(job).retryable() == ["b"]
    assert summary(job, 10).retryable_failures == 1
    rerun = tmp_path / "rerun.jsonl"
    assert write_rerun_file(job, ["b"], rerun) == 1
    assert json.loads(rerun.read_text())["custom_id"] == "b"


def test_verify_says_what_the_chains_prove_and_prints_their_heads(studio_home, tmp_path):
    job = finished_job(studio_home, {"a": "yes", "b": None, "c": "ok"})
    assert verify(job).ok
    result = cli("verify", job.job_id)
    assert result.returncode == 0 and "hash chains intact" in result.stdout
    assert "untampered" not in result.stdout  # an unkeyed chain beside the data cannot say so
    assert "catch corruption and naive edits" in result.stdout
    for path in (job.output, job.errors):
        head = json.loads(path.read_text().splitlines()[-1])["chain_sha256"]
        assert f"chain head of {path.name}: {head}" in result.stdout


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


def test_a_damaged_output_line_is_named_by_verify_reconcile_export_and_resume(
    studio_home, tmp_path, no_worker
):
    """A line of NUL bytes once gave tracebacks (verify, export) and turned a completed job
    into a failed one on resume; each now names the file and line, and the job stays."""
    job = finished_job(studio_home, {"a": "x", "b": "y", "c": "z"})
    lines = job.output.read_bytes().splitlines(keepends=True)
    lines[1] = b'{"id": "b\x00\x00\x00\n'
    job.output.write_bytes(b"".join(lines))
    named = f"{job.output} line 2 is not a JSON object"
    verified = cli("verify", job.job_id)
    assert verified.returncode == 1 and named in verified.stdout
    for args in (
        ("reconcile", job.job_id),
        ("export", job.job_id, "-o", str(tmp_path / "results.csv")),
        ("resume", job.job_id),
    ):
        result = cli(*args)
        assert result.returncode != 0 and named in result.stderr, args
    assert not (tmp_path / "results.csv").exists()
    assert no_worker == [] and job.read_status().state == "completed"


def test_reconcile_cli_writes_the_rerun_file(studio_home, tmp_path):
    fault = ("engine_error", "the engine stopped")  # a retry may change it
    job = finished_job(
        studio_home,
        [{"custom_id": "a", "answer": "yes"}, {"custom_id": "b", "answer": None, "error": fault}],
    )
    rerun = tmp_path / "rerun.jsonl"
    result = cli("reconcile", job.job_id, "--write-rerun", str(rerun))
    assert result.returncode == 0
    assert "2 requests, 1 succeeded, 1 failed" in result.stdout
    assert "1 x engine_error: the engine stopped" in result.stdout
    assert [json.loads(x)["custom_id"] for x in rerun.read_text().splitlines()] == ["b"]


@pytest.mark.parametrize(
    "path",
    sorted((REPO_ROOT / "tests" / "broken").glob("*.jsonl"))
    + sorted((REPO_ROOT / "tests" / "hostile").glob("*.jsonl"))
    + sorted(SAMPLE_DATA.glob("*.jsonl")),
    ids=lambda p: p.name,
)
def test_the_ledger_reads_each_lines_id_as_the_check_does(path, tmp_path):
    """The ledger reads only ids (fast, for a million lines); the check reads everything:
    on every broken and hostile file they must agree, line by line."""
    from core.check import scan

    job = JobFolder(tmp_path)
    job.input.write_bytes(path.read_bytes())
    by_check = [(c.line_no, c.custom_id or f"line-{c.line_no}") for c in scan(job.input)]
    assert list(input_lines(job)) == by_check


def test_the_ledger_follows_a_growing_file_and_reads_only_what_was_added(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": None, "c": "no"})
    reader = LedgerReader(job)
    ledger = reader.read()
    assert ledger.succeeded == {"a", "c"} and set(ledger.failed) == {"b"}
    version = reader.version
    assert reader.read() is ledger and reader.version == version  # nothing new: no work
    with OutputWriter(job.output) as writer:  # b retried and succeeded; then a torn line
        writer.write([success_line("b", "m", Completion(1, [Choice("ok", "stop", 1)]))])
    with job.output.open("ab") as handle:
        handle.write(b'{"custom_id": "zz"')
    ledger = reader.read()
    assert ledger.succeeded == {"a", "b", "c"} and ledger.failed == {}
    assert reader.version > version and not ledger.unexpected
    assert reader.read().succeeded == read_ledger(job).succeeded  # same as a fresh read


def test_every_shard_not_completed_may_be_retried():
    parts = [
        Shard(0, "a", "b", 2, 2, 0),  # completed
        Shard(1, "c", "d", 2, 0, 2),  # failed
        Shard(2, "e", "f", 2, 1, 0),  # partial
        Shard(3, "g", "h", 2, 0, 0),  # pending
    ]
    assert [p.state for p in parts] == ["completed", "failed", "partial", "pending"]
    assert retryable_shards(parts) == [1, 2, 3]
