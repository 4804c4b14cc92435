"""The Monitor's figures of a job the real engine ran (issue 38, item 13)."""

from __future__ import annotations

import json

import pytest

from core.run.monitoring import rates, read_samples
from tests.support.cli import cli
from tests.support.pages import metric, open_page
from tests.support.warm_engine import started_job

pytestmark = pytest.mark.engine

LINES = 40


def test_a_job_the_warm_engine_ran_ends_on_its_counts_and_a_true_average(
    warm_home, tmp_path, default_model
) -> None:
    """All requests in the engine at once, each to its limit: they finish together, after
    the last heartbeat. That sample said ``done: 0`` and the Monitor "Requests/s (average)
    0.00" for a true 3.4/s."""
    batch = tmp_path / "same_length.jsonl"
    body = {"model": "m", "max_tokens": 24, "temperature": 0}
    rows = [
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {**body, "messages": [{"role": "user", "content": f"Count from {i} to 999."}]}}
        for i in range(LINES)
    ]  # fmt: skip
    batch.write_text("".join(json.dumps(row) + "\n" for row in rows))
    # The model loaded first (a no-op where an earlier test did): the figures below are a
    # warm engine's, and the first job on a cold one also counts the engine's warm-up.
    warm_up = tmp_path / "warm_up.jsonl"
    warm_up.write_text(json.dumps({**rows[0], "custom_id": "warm-up"}) + "\n")
    assert cli("run", str(warm_up), "-o", str(tmp_path / "warm_up_out.jsonl")).returncode == 0
    result = cli("run", str(batch), "-o", str(tmp_path / "out.jsonl"))
    assert result.returncode == 0, result.stderr[-2000:]
    job = started_job(result, warm_home)
    status = job.read_status()
    samples = read_samples(job.metrics)
    assert (samples[-1]["done"], samples[-1]["output_tokens"]) == (LINES, status.completion_tokens)
    speed = rates(samples, status)
    run_seconds = status.elapsed_seconds - (status.model_load_seconds or 0)
    # Results over the running time: never more than over the whole run, nor 0.
    assert LINES / run_seconds * 0.99 <= speed.requests_per_s <= LINES / 1.0
    assert speed.tokens_per_s >= status.completion_tokens / run_seconds * 0.99
    at = open_page("monitor.py", job_id=job.job_id)
    assert metric(at, "Requests/s (average)") == f"{speed.requests_per_s:.2f}"
    assert float(metric(at, "Requests/s (average)")) > 0
