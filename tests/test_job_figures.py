"""A job's figures are the job's, over all its runs (issue 30, item 2): a resume or a retry
starts the counts and token totals from the result files; the run's own are kept beside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.jobs.folder import JobFolder, queue_job
from core.run import worker
from core.run.outputs import Choice, Completion, success_line, token_usage
from core.run.status_keeper import StatusKeeper
from tests.support.jobs import StandIn, finished_job
from tests.support.pages import metric, open_page, texts

pytestmark = pytest.mark.usefixtures("studio_home")

FAULT = ("engine_error", "the engine stopped")


class Answers(StandIn):
    """Answers every request with ``tokens`` output tokens."""

    def __init__(self, tokens: int = 7) -> None:
        self.tokens = tokens

    def run(self, requests):
        completion = Completion(4, [Choice("fine", "stop", self.tokens)])
        yield [success_line(r.custom_id, "tiny", completion) for r in requests]


def output_tokens(job: JobFolder) -> tuple[int, int]:
    """(prompt, output) tokens summed over output.jsonl, as a reader of the file counts."""
    lines = [json.loads(raw) for raw in job.output.read_text().splitlines()]
    usages = [token_usage(line) for line in lines]
    return sum(u[0] for u in usages), sum(u[1] for u in usages)


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
    assert "This run: 0 results, 0 output tokens" in texts(at)
    assert metric(at, "Succeeded") == "3"


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
    keeper.expect({"c": (10, 10), "d": (10, 10)}, bound=True, tokens_per_s=None)
    status = job.read_status()
    assert status.done == 2
    assert (status.generated_tokens, status.expected_output_tokens) == (20, 40)
