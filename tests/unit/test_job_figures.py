"""A job's figures are the job's, over all its runs (issue 30, item 2): a resume or a retry
starts the counts and token totals from the result files; the run's own are kept beside."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.jobs.folder import queue_job
from core.run import worker
from core.run.outputs import Choice, Completion, success_line
from core.run.status_keeper import StatusKeeper
from tests.support.job_figures import output_tokens
from tests.support.jobs import StandIn, finished_job
from tests.support.live_progress import expected_of

pytestmark = pytest.mark.usefixtures("studio_home")

FAULT = ("engine_error", "the engine stopped")


class Answers(StandIn):
    """Answers every request with ``tokens`` output tokens."""

    def __init__(self, tokens: int = 7) -> None:
        self.tokens = tokens

    def run(self, requests):
        completion = Completion(4, [Choice("fine", "stop", self.tokens)])
        yield [success_line(r.custom_id, "tiny", completion) for r in requests]


def test_a_retry_adds_its_answers_to_the_jobs_figures(studio_home: Path, monkeypatch) -> None:
    rows = [
        {"custom_id": "a", "answer": "yes", "tokens": 11},
        {"custom_id": "b", "answer": None, "error": FAULT},
    ]
    job = finished_job(studio_home, rows)
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Answers(7))
    queue_job(job, retry=True)
    status = worker.run_job(job, retry=True)
    assert (status.succeeded, status.failed) == (2, 0)
    assert (status.prompt_tokens, status.completion_tokens) == output_tokens(job) == (9, 18)
    assert (status.run_done, status.run_completion_tokens) == (1, 7)


def test_a_resumed_runs_progress_counts_the_whole_job(studio_home: Path) -> None:
    """The bar's share of output tokens: the answers of earlier runs count as generated."""
    rows = [{"custom_id": c, "answer": "yes", "tokens": 10} for c in "ab"]
    job = finished_job(studio_home, rows)
    keeper = StatusKeeper(job)
    keeper.seed({"a", "b"}, set())
    keeper.expect(expected_of({"c": (10, 10), "d": (10, 10)}), bound=True, tokens_per_s=None)
    status = job.read_status()
    assert status.done == 2
    assert (status.generated_tokens, status.expected_output_tokens) == (20, 40)
