"""The pages tests of tests/unit/test_job_figures.py (split from it by kind; docs/tests.md).

A job's figures are the job's, over all its runs (issue 30, item 2): a resume or a retry
starts the counts and token totals from the result files; the run's own are kept beside."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.jobs.folder import queue_job
from core.run import worker
from tests.support.job_figures import output_tokens
from tests.support.jobs import finished_job
from tests.support.pages import metric, open_page, texts

pytestmark = pytest.mark.usefixtures("studio_home")


def test_a_resume_with_nothing_to_run_keeps_the_jobs_token_totals(studio_home: Path) -> None:
    rows = [{"custom_id": c, "answer": "yes", "tokens": 11} for c in "abc"]
    job = finished_job(studio_home, rows)
    assert job.read_status().completion_tokens == 33
    queue_job(job)  # "Resume (0 to run)": nothing without a result
    status = worker.run_job(job)
    assert (status.state, status.succeeded, status.failed) == ("completed", 3, 0)
    assert (status.prompt_tokens, status.completion_tokens) == output_tokens(job) == (15, 33)
    assert (status.runs, status.run_done, status.run_completion_tokens) == (2, 0, 0)
    saved = job.read_status()
    assert saved.completion_tokens == 33 and saved.job_seconds >= saved.elapsed_seconds
    at = open_page("monitor.py", job_id=job.job_id)
    assert "completed: 3 succeeded, 0 failed, 33 output tokens in" in texts(at)
    assert "over 2 runs" in texts(at)
    assert "the speeds and the ETA are this run's: 0 results, 0 output tokens" in texts(at)
    assert metric(at, "Succeeded") == "3"
