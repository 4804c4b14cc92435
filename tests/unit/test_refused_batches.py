"""A batch that failed validation made no job, but it was submitted: the Jobs page and
``core jobs list`` show it beside the jobs, with its state and reason (issue 38, item 14:
it was in ``GET /v1/batches`` and nowhere else)."""

from __future__ import annotations

import json

from tests.support.cli import cli
from tests.support.refused_batches import refused_batch


def test_core_jobs_list_shows_a_batch_that_failed_validation(client) -> None:
    batch = refused_batch(client)
    listed = cli("jobs", "list")
    assert listed.returncode == 0, listed.stderr
    [line] = [row for row in listed.stdout.splitlines() if batch.id in row]
    assert "failed" in line and "nightly refunds" in line
    assert "failed validation: line 2:" in line
    [row] = json.loads(cli("jobs", "list", "--json").stdout)
    assert row["job_id"] is None and row["batch_id"] == batch.id
    assert (row["state"], row["requests"], row["name"]) == ("failed", 0, "nightly refunds")
    assert row["reason"].startswith("failed validation: line 2: ")
