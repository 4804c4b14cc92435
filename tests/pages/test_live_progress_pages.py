"""The pages tests of tests/unit/test_live_progress.py (split from it by kind; docs/tests.md).

Live numbers and cancel, without the engine: the rates the Monitor shows, the worker's
bookkeeping of generated and expected tokens, and a cancel that stops the engine."""

from __future__ import annotations

import json
import time

from core.run.outputs import success_line
from core.schemas import JobStatus
from tests.support.jobs import monitored_job
from tests.support.live_progress import running_status
from tests.support.pages import metric, open_page, shown, texts


def test_the_monitor_says_the_model_is_loading_instead_of_an_eta(studio_home) -> None:
    job = monitored_job(studio_home)
    status = running_status(total=80, expected_output_tokens=2_700, measured_tokens_per_s=100.0)
    status.enter("loading", "loading the model")
    status.measured_load_seconds = 77.0
    job.write_status(status)
    at = open_page("monitor.py", job_id=job.job_id)
    eta = next(m for m in at.metric if m.label == "ETA")
    assert eta.value.startswith("loading, ~1:1")  # 1:17 less the seconds since
    assert "last load here took 1:17" in eta.help
    progress = at.get("progress")[0].proto
    assert "0% of about 2,700 expected output tokens generated" in progress.text


def test_a_job_waiting_for_its_model_says_why_on_the_monitor_and_jobs_pages(studio_home) -> None:
    """Issue 41: the worker's reason, as plain text (a model name's ``_`` or ``~`` is not
    markdown); the ETA counts no load down while it waits."""
    job = monitored_job(studio_home)
    status = running_status(total=80)
    why = (
        "waiting for memory: my_model needs ~3.0 GiB beside the loaded alpha (used by "
        "running job job_1); it loads when one of them ends"
    )
    status.enter("loading", why)
    job.write_status(status)
    for page in ("monitor.py", "jobs.py"):
        at = open_page(page, job_id=job.job_id)
        assert not at.exception, [e.message for e in at.exception]
        assert why in [shown(c.value) for c in at.caption], page
    eta = next(m for m in open_page("monitor.py", job_id=job.job_id).metric if m.label == "ETA")
    assert eta.value == "loading"


def test_the_monitor_shows_a_finished_jobs_average_not_its_last_samples(studio_home) -> None:
    from datetime import UTC, datetime

    job = monitored_job(studio_home)
    t0 = time.time() - 60
    samples = [{"t": t0 + 0.5 + 2 * i, "done": 0, "output_tokens": 200 * i} for i in range(12)]
    job.metrics.write_text("".join(json.dumps(s) + "\n" for s in samples))
    status = JobStatus(
        state="completed", total=80, done=80, succeeded=80, run_done=80, runs=1,
        completion_tokens=2_400, run_completion_tokens=2_400, elapsed_seconds=24.0,
        model_load_seconds=0.0, job_seconds=24.0,
    )  # fmt: skip
    status.started_at = datetime.fromtimestamp(t0, UTC).isoformat()
    status.finished_at = datetime.fromtimestamp(t0 + 24, UTC).isoformat()
    job.write_status(status)
    at = open_page("monitor.py", job_id=job.job_id)
    assert metric(at, "Requests/s (average)") == "3.40"  # 80 in 23.5 s; it showed 0.00
    assert metric(at, "Output tokens/s (average)") == "102"


def test_the_monitor_shows_engine_progress_and_an_eta_bound_when_nothing_was_measured(
    studio_home,
) -> None:
    job = monitored_job(studio_home)
    now = time.time()
    samples = [
        {"t": now - age, "done": 0, "output_tokens": tokens, "rss_mib": 900}
        for age, tokens in ((30, 0), (20, 200), (10, 600), (0, 1_000))
    ]
    job.metrics.write_text("".join(json.dumps(s) + "\n" for s in samples))
    status = running_status(
        total=200, generated_tokens=1_000, expected_output_tokens=4_000, expected_is_bound=True
    )
    job.write_status(status)
    at = open_page("monitor.py", job_id=job.job_id)
    progress = at.get("progress")[0].proto
    # The share against the total it is measured on (it read "25% of the at most output
    # tokens generated").
    assert "running: 0 / 200 requests · 25% of at most 4,000 output tokens generated" in (
        progress.text
    )
    assert progress.value == 25
    assert metric(at, "Output tokens/s") == "40"  # from the first sample that moved
    assert metric(at, "ETA") == "≤ 1:15"  # 3,000 tokens to go at 40/s, at most
    assert [b.label for b in at.button] == ["Cancel"]
    status.enter("cancelling")
    job.write_status(status)
    at = open_page("monitor.py", job_id=job.job_id)
    assert metric(at, "ETA") == "–"
    assert [b.label for b in at.button] == ["Stop now"]


def test_a_resumed_monitor_says_which_figures_are_this_runs_and_waits_for_a_speed(
    studio_home,
) -> None:
    """Issue 58, item 10: after a resume the caption said every figure was the whole job's
    beside this run's speeds, and the ETA read 0:01 at 0 of 39 beside "Output tokens/s 0"."""
    job = monitored_job(studio_home)
    status = running_status(
        total=39, done=11, succeeded=11, runs=2, run_done=0, completion_tokens=330,
        run_completion_tokens=0, generated_tokens=355, expected_output_tokens=1_254,
        measured_tokens_per_s=1_000.0, eta_seconds=1.0, eta_at=time.time(),
    )  # fmt: skip
    job.write_status(status)
    at = open_page("monitor.py", job_id=job.job_id)
    assert metric(at, "ETA") == "estimating"
    assert metric(at, "Output tokens/s (this run)") == "measuring"
    assert metric(at, "Requests/s (this run)") == "0.00"
    assert "Succeeded, Failed and Elapsed are the whole job's, over its 2 runs; the speeds " in (
        texts(at)
    )
    progress = at.get("progress")[0].proto
    assert "3% of about 924 expected output tokens generated (this run's; 330 more" in (
        progress.text
    )


def test_a_queued_job_shows_its_requests_and_the_job_it_waits_for(studio_home) -> None:
    """Issue 58, item 17: a queued job showed "queued: 0 / 0 requests" and not which job
    it waited for."""
    from core.jobs.folder import create_job, queue_job
    from core.schemas import EngineConfig
    from tests.support.jobs import request_line

    running = monitored_job(studio_home)
    running.write_status(running_status(total=1))
    batch = studio_home / "five.jsonl"
    batch.write_text("".join(request_line(f"q{i}", "hi") + "\n" for i in range(5)))
    waiting = create_job(batch, studio_home / "jobs", EngineConfig(model="/models/tiny"),
                         name="Five tickets")  # fmt: skip
    assert waiting.read_status().total == 5  # known when it is made: Jobs showed 0
    queue_job(waiting)
    at = open_page("monitor.py", job_id=waiting.job_id)
    assert "queued: 0 / 5 requests" in at.get("progress")[0].proto.text
    assert f"Waits for {running.job_id}: it runs once that job ends." in texts(at)
    # A worker running jobs side by side says why this one cannot join them yet.
    status = waiting.read_status()
    status.message = f"queued: waits for a free place beside {running.job_id} (at most 1 at once)"
    waiting.write_status(status)
    at = open_page("monitor.py", job_id=waiting.job_id)
    said = f"Waits for a free place beside {running.job_id} (at most 1 at once)"
    assert said in texts(at)


def test_the_monitor_charts_each_gpus_memory_and_load(studio_home) -> None:
    job = monitored_job(studio_home)
    now = time.time()
    gpus = [
        {
            "index": i,
            "memory_used_mib": 1000.0 * (i + 1),
            "memory_total_mib": 8e4,
            "utilization": 50,
        }
        for i in range(2)
    ]
    samples = [{"t": now - 2 * k, "done": 0, "output_tokens": 0, "gpus": gpus} for k in (2, 1)]
    job.metrics.write_text("".join(json.dumps(s) + "\n" for s in samples))
    job.write_status(running_status(total=1))
    at = open_page("monitor.py", job_id=job.job_id)
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert [c["layout"]["title"]["text"] for c in charts] == ["GPU memory (MiB)", "GPU %"]
    memory = {trace["name"]: trace["y"] for trace in charts[0]["data"]}
    assert memory == {"GPU 0": [1000.0, 1000.0], "GPU 1": [2000.0, 2000.0]}
    assert charts[0]["layout"]["yaxis"]["range"] == [0.0, 2200.0]
    assert charts[1]["layout"]["yaxis"]["range"] == [0.0, 100]


def test_the_memory_chart_draws_a_tiny_change_flat(studio_home) -> None:
    """Issue 58, item 17: a worker's RSS moving by 0.014 MiB filled the chart as a climb."""
    job = monitored_job(studio_home)
    now = time.time()
    samples = [
        {"t": now - 4 + k, "done": 0, "output_tokens": 0, "rss_mib": 900 + 0.007 * k,
         "cpu_percent": 1.0}
        for k in range(3)
    ]  # fmt: skip
    job.metrics.write_text("".join(json.dumps(s) + "\n" for s in samples))
    job.write_status(running_status(total=1))
    at = open_page("monitor.py", job_id=job.job_id)
    axes = {
        c["layout"]["title"]["text"]: c["layout"]["yaxis"]["range"]
        for c in (json.loads(chart.proto.spec) for chart in at.get("plotly_chart"))
    }
    assert axes["Worker RSS (MiB)"][0] == 0.0 and axes["Worker RSS (MiB)"][1] >= 990
    assert axes["Worker CPU %"] == [0.0, 100.0]


def test_an_embeddings_job_shows_texts_embedded_per_second(studio_home, tmp_path) -> None:
    import numpy as np

    from core.run.outputs import Embeddings
    from core.run.status_keeper import StatusKeeper

    job = monitored_job(studio_home)
    keeper = StatusKeeper(job)
    keeper.update(state="running", total=3)  # no heartbeat thread: the test writes the status
    vectors = [np.ones(3, dtype=np.float32)] * 2
    keeper.count([success_line("a", "m", Embeddings(5, vectors), "/v1/embeddings")])
    assert (keeper.status.embedded, keeper.status.prompt_tokens) == (2, 5)  # two inputs
    now = time.time()
    samples = [
        {"t": now - age, "done": done, "output_tokens": 0, "embedded": texts}
        for age, done, texts in ((30, 0, 0), (20, 10, 40), (10, 20, 80), (0, 30, 130))
    ]
    job.metrics.write_text("".join(json.dumps(s) + "\n" for s in samples))
    job.write_status(running_status(total=100, done=30, succeeded=30, embedded=130))
    at = open_page("monitor.py", job_id=job.job_id)
    # (130 - 40) texts in the 20 s since the first sample that moved.
    assert metric(at, "Texts embedded/s") == "4"
    assert metric(at, "Requests/s") == "1.00"
    # No tokens to count: the ETA is the 70 requests left at 1 request/s, and says so.
    eta = next(m for m in at.metric if m.label == "ETA")
    assert eta.value == "1:10" and "requests still without a result" in eta.help
