"""What Monitor says of a job, without a page: durations, the ETA, the verdict, the Ray
tables and the per-GPU chart series (core.run.progress, core.run.ray_stats,
core.run.monitoring)."""

from __future__ import annotations

import os
import time

from core.run.monitoring import Rates, gpu_series, thinned
from core.run.progress import duration, eta, final_summary, job_seconds, work_text
from core.run.ray_stats import device_rows, node_rows, replica_rows
from core.schemas import JobState, JobStatus


def test_durations_read_as_a_clock() -> None:
    assert [duration(s) for s in (None, 0, 59.9, 61, 3_600, 3_725)] == [
        "–",
        "0:00",
        "0:59",
        "1:01",
        "1:00:00",
        "1:02:05",
    ]


def test_the_job_seconds_fall_back_on_the_runs_for_an_old_status() -> None:
    assert job_seconds(JobStatus(job_seconds=90.0, elapsed_seconds=30.0)) == 90.0
    assert job_seconds(JobStatus(elapsed_seconds=30.0)) == 30.0


def test_the_eta_says_what_it_counts_and_when_it_is_at_most() -> None:
    running = JobStatus(state=JobState.RUNNING, pid=os.getpid(), heartbeat_at=time.time())
    assert eta(JobStatus(state=JobState.COMPLETED), Rates())[0] == "done"
    assert eta(running, Rates(loading=True))[0] == "loading"
    assert eta(running, Rates())[0] == "estimating"
    assert eta(running, Rates(eta_seconds=75, eta_counts="requests"))[0] == "1:15"
    value, help = eta(running, Rates(eta_seconds=75, eta_is_bound=True))
    assert value == "≤ 1:15" and help.startswith("At most")


def test_the_work_done_says_whether_the_total_is_a_bound() -> None:
    bound = JobStatus(expected_output_tokens=12_800, expected_is_bound=True)
    assert work_text(0.25, bound) == "25% of at most 12,800 output tokens generated"
    measured = JobStatus(expected_output_tokens=12_800)
    assert work_text(0.25, measured) == "25% of about 12,800 expected output tokens generated"


def test_the_verdict_counts_texts_for_an_embeddings_job_and_names_the_runs() -> None:
    chat = JobStatus(succeeded=9, failed=1, completion_tokens=1_234, job_seconds=65, runs=2)
    assert final_summary(chat) == "9 succeeded, 1 failed, 1,234 output tokens in 1:05 over 2 runs."
    embeddings = JobStatus(succeeded=3, embedded=3, elapsed_seconds=2, runs=1)
    assert final_summary(embeddings) == "3 succeeded, 0 failed, 3 texts embedded in 0:02."


def test_the_verdict_says_reused_answers_tokens_were_reused_not_made() -> None:
    """Issue 58, item 10: a job answered wholly from earlier results "made 1,254 output
    tokens in 0:00"."""
    reused = JobStatus(
        succeeded=39, completion_tokens=1_254, reused=39, reused_completion_tokens=1_254,
        job_seconds=0.2, runs=1,
    )  # fmt: skip
    assert final_summary(reused) == (
        "39 succeeded, 0 failed, 0 output tokens generated and 1,254 reused from earlier "
        "answers in 0:00."
    )
    part = reused.model_copy(update={"completion_tokens": 1_255, "reused_completion_tokens": 1_254})
    assert "1 output token generated and 1,254 reused" in final_summary(part)


def test_the_ray_tables_have_a_row_per_node_replica_and_gpu() -> None:
    stats = {
        "nodes": [
            {"node_id": "n" * 20, "host": "a", "resources": {"CPU": 4}, "gpus": [{"index": 0}]},
            {"node_id": "m", "host": "b"},
        ],
        "replicas": [{"replica_id": "r" * 20, "node_id": "n" * 20, "state": "running"}],
    }
    nodes = node_rows(stats)
    assert [n["node"] for n in nodes] == ["n" * 12, "m"]
    assert (nodes[0]["CPU"], nodes[1]["CPU"], nodes[1]["done"]) == (4, None, 0)
    assert replica_rows(stats)[0]["replica"] == "r" * 12
    [gpu] = device_rows(stats)
    assert (gpu["host"], gpu["GPU"], gpu["memory used MiB"]) == ("a", 0, 0)
    assert node_rows({}) == replica_rows({}) == device_rows({}) == []


def test_each_gpu_is_one_series_and_long_runs_are_thinned() -> None:
    samples = [
        {"t": 1, "gpus": [{"index": 0, "utilization": 10}, {"index": 1, "utilization": 20}]},
        {"t": 2, "gpus": [{"index": 1, "utilization": 30}]},
    ]
    assert gpu_series(["t1", "t2"], samples, "utilization") == {
        "GPU 0": (["t1"], [10]),
        "GPU 1": (["t1", "t2"], [20, 30]),
    }
    assert gpu_series([], [], "utilization") == {}
    assert len(thinned([{}] * 5_000, 2_000)) == 2_500
    assert len(thinned([{}] * 10, 2_000)) == 10
