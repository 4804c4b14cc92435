"""The pages tests of tests/unit/test_refused_batches.py (split from it by kind; docs/tests.md).

A batch that failed validation made no job, but it was submitted: the Jobs page and
``core jobs list`` show it beside the jobs, with its state and reason (issue 38, item 14:
it was in ``GET /v1/batches`` and nowhere else)."""

from __future__ import annotations

from tests.support.pages import open_page
from tests.support.refused_batches import refused_batch


def test_the_jobs_page_shows_a_batch_that_failed_validation_with_its_reason(client) -> None:
    batch = refused_batch(client)
    at = open_page("jobs.py")  # no job at all: the refused batch still shows
    assert "Batches that failed validation" in [s.value for s in at.subheader]
    [table] = [d.value for d in at.dataframe if "batch_id" in d.value.columns]
    [row] = table.to_dict("records")
    assert (row["batch_id"], row["state"], row["name"]) == (batch.id, "failed", "nightly refunds")
    assert row["reason"].startswith("failed validation: line 2: ")
    assert "No jobs yet" in at.info[0].value
