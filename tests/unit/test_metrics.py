"""``GET /metrics`` (issue 41 item 4): the studio's figures in Prometheus' text format,
scraped through the API's routes in this process and parsed by prometheus_client, equal
to counts made by hand from the jobs the test made."""

from __future__ import annotations

import subprocess
import sys

import pytest

from core.api.keys import create_key
from core.config import REPO_ROOT, data_paths
from core.nvml import GpuReader
from core.run.metrics import studio_figures
from tests.support.api import own
from tests.support.jobs import finished_job
from tests.support.metrics import (
    FIRST_TOKEN_AFTER,
    KV_CACHE_USAGE,
    loopback,
    scrape,
    studio,
    total,
    value,
)


def test_a_scrape_counts_the_jobs_their_lines_tokens_errors_and_latencies(studio_home):
    jobs = studio(studio_home)
    me = jobs["finished"].read_spec().owner
    with loopback() as client:
        got = scrape(client)
    jobs_by_state = {
        state: value(got, "batch_studio_jobs", state=state, owner=me)
        for state in ("completed", "failed", "queued", "running", "created", "interrupted")
    }
    assert jobs_by_state == {
        "completed": 1, "failed": 1, "queued": 1, "running": 1, "created": 0, "interrupted": 0
    }  # fmt: skip
    # The running job was queued with 10 lines too, but it runs: only the waiting one's 4.
    assert value(got, "batch_studio_queued_lines", owner=me) == 4
    assert value(got, "batch_studio_running_requests", model="tiny", owner=me) == 3
    # Answers: a and c of the finished job, f of the failed one: 5 prompt, 3 output each.
    assert value(got, "batch_studio_prompt_tokens_total", model="tiny", owner=me) == 15
    assert value(got, "batch_studio_generation_tokens_total", model="tiny", owner=me) == 9
    assert value(got, "batch_studio_requests_succeeded_total", model="tiny", owner=me) == 3
    assert value(got, "batch_studio_reused_answers_total", owner=me) == 0
    errors = value(got, "batch_studio_request_errors_total", model="tiny", code="engine_rejected")
    assert errors == 1
    assert value(got, "batch_studio_kv_cache_usage", model="tiny") == KV_CACHE_USAGE
    # Latencies 1.2, 0.04 and 0.25 s.
    latency = "batch_studio_request_latency_seconds"
    assert value(got, f"{latency}_count", model="tiny") == 3
    assert value(got, f"{latency}_sum", model="tiny") == pytest.approx(1.49)
    assert value(got, f"{latency}_bucket", model="tiny", le="0.1") == 1
    assert value(got, f"{latency}_bucket", model="tiny", le="0.3") == 2
    assert value(got, f"{latency}_bucket", model="tiny", le="1.0") == 2
    assert value(got, f"{latency}_bucket", model="tiny", le="1.5") == 3
    first = "batch_studio_time_to_first_token_seconds"
    assert value(got, f"{first}_count", model="tiny") == 1  # only the running job had one
    assert value(got, f"{first}_sum", model="tiny") == pytest.approx(FIRST_TOKEN_AFTER, abs=0.01)
    assert value(got, f"{first}_bucket", model="tiny", le="2.0") == 0
    assert value(got, f"{first}_bucket", model="tiny", le="5.0") == 1


def test_a_scrape_follows_a_jobs_new_results_and_a_deleted_job(studio_home):
    jobs = studio(studio_home)
    finished = jobs["finished"]
    with loopback() as client:
        before = scrape(client)
        with finished.errors.open("a") as handle:  # a retry's failure, appended
            handle.write(finished.errors.read_text().splitlines()[0].replace(
                "engine_rejected", "timeout") + "\n")  # fmt: skip
        after = scrape(client)
        for path in sorted(jobs["failed"].path.iterdir()):
            path.unlink()
        jobs["failed"].path.rmdir()
        gone = scrape(client)
    assert total(before, "batch_studio_request_errors_total") == 1
    assert value(after, "batch_studio_request_errors_total", model="tiny", code="timeout") == 1
    assert total(after, "batch_studio_request_errors_total") == 2
    assert total(gone, "batch_studio_jobs", state="failed") == 0
    assert total(gone, "batch_studio_generation_tokens_total") == 6


def test_beyond_loopback_a_scrape_needs_a_key_and_a_key_sees_its_own_jobs(api, keys, studio_home):
    jobs = studio(studio_home)
    own(jobs["queued"], "alice")
    refused = api.get("/metrics")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"
    assert api.get("/metrics", headers={"Authorization": "Bearer bs-guess"}).status_code == 401
    alice = scrape(api, keys["alice"])
    assert total(alice, "batch_studio_jobs") == 1
    assert value(alice, "batch_studio_jobs", state="queued", owner="alice") == 1
    assert value(alice, "batch_studio_queued_lines", owner="alice") == 4
    assert total(alice, "batch_studio_generation_tokens_total") == 0  # nobody else's
    bob = scrape(api, keys["bob"])
    assert total(bob, "batch_studio_jobs") == 0
    new = create_key(data_paths().home, "carol")
    assert total(scrape(api, new), "batch_studio_jobs") == 0
    with loopback() as client:
        assert total(scrape(client), "batch_studio_jobs") == 4  # this machine's user: all


def test_a_result_line_is_read_once_and_new_lines_are_read_on(studio_home):
    """The figures read only what was appended since the last read: a line already read
    is not read again (rewritten in place, its old latency stands), a new one counts."""
    jobs = studio(studio_home)
    output = jobs["finished"].output
    first = studio_figures(data_paths().jobs).latency["tiny"]
    raw = output.read_bytes()
    assert raw.count(b'"latency_ms": 1200') == 1
    with output.open("r+b") as handle:  # same file, same size: 1.2 s becomes 9.9 s
        handle.seek(raw.index(b'"latency_ms": 1200'))
        handle.write(b'"latency_ms": 9900')
    again = studio_figures(data_paths().jobs).latency["tiny"]
    assert (again.count, again.total) == (first.count, first.total) == (3, pytest.approx(1.49))
    last = raw.splitlines()[-1].replace(b'"custom_id": "c"', b'"custom_id": "d"')
    with output.open("ab") as handle:
        handle.write(last + b"\n")
    grown = studio_figures(data_paths().jobs).latency["tiny"]
    assert grown.count == 4


def test_the_gpu_readings_bench_needs_only_torch_and_nvidia_ml_py():
    """bench/gpu_readings.py runs on a GPU machine that has torch and nvidia-ml-py and
    nothing else of the studio: the reader it shares with Monitor imports no other
    package, and without a GPU the script says so and ends well."""
    probe = (
        "import sys, runpy; sys.argv = ['gpu_readings.py']\n"
        "try:\n    runpy.run_path('bench/gpu_readings.py', run_name='__main__')\n"
        "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "names = {m.split('.')[0] for m in sys.modules if not m.startswith('_')}\n"
        "print(sorted(names - set(sys.stdlib_module_names) - {'core', 'torch', 'pynvml'}))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    if GpuReader().count == 0:  # this machine: no GPU, nothing allocated
        assert run.stdout.startswith("No GPU found"), run.stdout
    assert run.stdout.splitlines()[-1] == "[]"  # no psutil, pydantic, vllm, streamlit...


def test_a_job_of_a_base_model_and_an_adapter_counts_each_ones_answers_and_tokens(
    studio_home, default_model
):
    """A job whose lines name a base model and a LoRA adapter: each answer's tokens count
    under the model it names, as Dashboards count them, not all under the job's first model
    (issue 41 item 4)."""
    from tests.support.lora import make_adapter

    adapter = make_adapter(studio_home / "tuned", default_model)
    rows = [
        {"custom_id": "base-1", "model": default_model.name, "answer": "yes"},
        {"custom_id": "base-2", "model": default_model.name, "answer": "no"},
        {"custom_id": "tuned-1", "model": "ft-a", "answer": "maybe"},
    ]
    model_map = {default_model.name: str(default_model), "ft-a": str(adapter)}
    job = finished_job(studio_home, rows, model=default_model, model_map=model_map)
    me = job.read_spec().owner
    with loopback() as client:
        got = scrape(client)
    succeeded = "batch_studio_requests_succeeded_total"
    assert value(got, succeeded, model=default_model.name, owner=me) == 2
    assert value(got, succeeded, model="ft-a", owner=me) == 1
    output = "batch_studio_generation_tokens_total"
    assert value(got, output, model="ft-a", owner=me) > 0
    assert total(got, output) == job.read_status().completion_tokens
