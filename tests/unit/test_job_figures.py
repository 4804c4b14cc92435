"""A job's figures are the job's, over all its runs (issue 30, item 2): a resume or a retry
starts the counts and token totals from the result files; the run's own are kept beside."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.check.engine_requests import ChatRequest
from core.jobs.folder import queue_job
from core.run import worker
from core.run.outputs import Choice, Completion, error_line, success_line
from core.run.pending import PlannedRequests
from core.run.status_keeper import ResultCounts, StatusKeeper
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
    keeper.seed(2, 0)
    keeper.expect(expected_of({"c": (10, 10), "d": (10, 10)}), bound=True, tokens_per_s=None)
    status = job.read_status()
    assert status.done == 2
    assert (status.generated_tokens, status.expected_output_tokens) == (20, 40)


def test_each_request_counts_once_whatever_its_results_say() -> None:
    """A success is final, a failure counts until its request succeeds; the earlier runs'
    counts stand as numbers, a retry's requests that failed before among them."""
    planned = PlannedRequests()
    for line_no, custom_id in enumerate("abc", start=1):
        request = ChatRequest(custom_id=custom_id, messages=[], sampling={})
        planned.add(request, line_no, "/models/m")
    counts = ResultCounts(succeeded=3, failed=2)  # "b" and one not run again failed before
    counts.plan(planned, ["b", "x"])
    steps = [
        ("a", False, (3, 3)),
        ("a", False, (3, 3)),  # failed again: still one failure
        ("a", True, (4, 2)),  # a success after a failure moves it
        ("a", True, (4, 2)),  # a duplicate success
        ("a", False, (4, 2)),  # a failure after a success changes nothing
        ("b", False, (4, 2)),  # failed before: counted already
        ("b", True, (5, 1)),
        ("line-7", False, (5, 2)),  # not planned (an invalid line's error)
        ("line-7", False, (5, 2)),
        ("line-7", True, (6, 1)),
        ("c", True, (7, 1)),
    ]
    for custom_id, succeeded, want in steps:
        counts.add(custom_id, succeeded)
        assert (counts.succeeded, counts.failed) == want, (custom_id, succeeded)


class Mixed(StandIn):
    """Answers ``b``, fails every other request again."""

    def run(self, requests):
        completion = Completion(4, [Choice("fine", "stop", 7)])
        yield [
            success_line(r.custom_id, "tiny", completion)
            if r.custom_id == "b"
            else error_line(r.custom_id, *FAULT, 500)
            for r in requests
        ]


def test_a_retry_counts_a_request_that_fails_again_once(studio_home: Path, monkeypatch) -> None:
    rows = [
        {"custom_id": "a", "answer": "yes", "tokens": 11},
        {"custom_id": "b", "answer": None, "error": FAULT},
        {"custom_id": "c", "answer": None, "error": FAULT},
    ]
    job = finished_job(studio_home, rows)
    assert (job.read_status().succeeded, job.read_status().failed) == (1, 2)
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Mixed())
    queue_job(job, retry=True)
    status = worker.run_job(job, retry=True)
    assert (status.succeeded, status.failed, status.done) == (2, 1, 3)
