"""The engine tests of tests/unit/test_s3.py (split from it by kind; docs/tests.md).

Object storage in and out (``s3://``), against a local S3 server (moto) the tests start.

The fast tests drive core/storage/s3.py, the delivery of a job's results and the worker
that delivers them; the one marked ``engine`` runs ``core run s3://... -o s3://...`` on the
real engine."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import run_cli
from tests.support.jobs import request_line
from tests.support.s3 import BUCKET, _object
from tests.support.warm_engine import started_job


@pytest.mark.engine
def test_core_run_reads_and_writes_objects_on_the_real_engine(warm_s3, warm_home, tmp_path):
    # On the warm worker, started with the session's S3 server's credentials (warm_s3).
    s3 = warm_s3
    uploads = set((warm_home / "uploads").glob("*.jsonl"))  # other tests' jobs are there
    lines = [request_line(f"r{i}", f"Say {i}.", max_tokens=4, temperature=0) for i in range(3)]
    s3.put_object(Bucket=BUCKET, Key="in.jsonl", Body=("\n".join(lines) + "\n").encode())
    args = ("run", f"s3://{BUCKET}/in.jsonl", "-o", f"s3://{BUCKET}/out/result.jsonl")
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    out = [json.loads(x) for x in _object(s3, "out/result.jsonl").splitlines()]
    assert [x["custom_id"] for x in out] == ["r0", "r1", "r2"]
    assert all(x["response"]["status_code"] == 200 and x["error"] is None for x in out)
    assert all(x["response"]["body"]["usage"]["completion_tokens"] <= 4 for x in out)
    assert _object(s3, "out/result.errors.jsonl") == b""
    # The job folder keeps the ledger: reconcile, and the results reach the store.
    job_id = started_job(result, warm_home).job_id
    assert run_cli("reconcile", job_id).returncode == 0
    assert run_cli("verify", job_id).returncode == 0
    export = run_cli("export", job_id, "-o", str(tmp_path / "r.jsonl"))
    assert export.returncode == 0, export.stderr
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 3
    # Gone from the bucket: the same command delivers the kept results again, runs nothing.
    s3.delete_object(Bucket=BUCKET, Key="out/result.jsonl")
    again = run_cli(*args)
    assert again.returncode == 0 and "continuing job" in again.stdout, again.stderr
    assert [json.loads(x) for x in _object(s3, "out/result.jsonl").splitlines()] == out
    assert set((warm_home / "uploads").glob("*.jsonl")) <= uploads  # fetched copies removed
