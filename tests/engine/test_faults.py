"""Faults a job must survive, on the real engine: kill -9, cancel, resume.

The job starts on the session's warm worker (tests/support/warm_engine.py) and kills it;
the rerun's worker, started cold, is the warm one from then on."""

import json
import os
import signal
import time

import pytest

from core.jobs.folder import JobFolder
from core.jobs.ledger import reconcile, verify
from tests.support.cli import run_cli
from tests.support.warm_engine import run_in_background, wait_until

pytestmark = pytest.mark.engine
CHUNK = 8
# Enough work that a resumed run is still running when the test looks and cancels: every
# answer is OUTPUT_TOKENS long (min_tokens), 8 at a time.
COUNT = 120
OUTPUT_TOKENS = 24


def batch(tmp_path, count):
    path = tmp_path / "batch.jsonl"
    lines = [
        json.dumps(
            {
                "custom_id": f"q{i:03d}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": "m",
                    "messages": [{"role": "user", "content": f"Count to {i % 7 + 2} (line {i})."}],
                    "max_tokens": OUTPUT_TOKENS,
                    "min_tokens": OUTPUT_TOKENS,
                    "temperature": 0,
                },
            }
        )
        for i in range(count)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def start_run(home, path, out):
    return run_in_background(home, str(path), "-o", str(out), "--chunk-size", str(CHUNK))


def success_ids(job: JobFolder) -> list[str]:
    return [json.loads(x)["custom_id"] for x in job.output.read_text().splitlines()]


def test_kill_cancel_and_resume_lose_nothing_and_repeat_nothing(warm_home, tmp_path, default_model):
    path, out = batch(tmp_path, COUNT), tmp_path / "out.jsonl"

    # 1. kill -9 the worker once results have been written.
    cli, job = start_run(warm_home, path, out)
    wait_until(job, lambda s: s.done >= CHUNK + 1 and s.state == "running")
    os.kill(job.read_status().pid, signal.SIGKILL)
    cli.communicate(timeout=60)
    assert cli.returncode == 3
    assert job.read_status().interrupted  # the UI shows it as interrupted, with Resume
    written_before = len(success_ids(job))

    # 2. The same command again continues the same job: nothing lost, nothing twice.
    cli, job2 = start_run(warm_home, path, out)
    assert job2.job_id == job.job_id
    wait_until(job, lambda s: s.state == "running" and s.done > written_before)

    # 3. Cancel while it runs: nothing new starts, the CHUNK requests in the engine finish
    # and are kept (OpenAI's "cancelling"), and the job ends within seconds.
    done_before = job.read_status().done
    asked = time.monotonic()
    result = run_cli("cancel", job.job_id)
    assert "finish and are kept" in result.stdout  # with how many will still finish
    cli.communicate(timeout=60)
    assert time.monotonic() - asked < 30
    status = job.read_status()
    assert status.state == "cancelled" and not status.interrupted
    assert [e["state"] for e in status.history][-3:] == ["running", "cancelling", "cancelled"]
    assert status.done >= done_before + CHUNK  # what was in the engine was not thrown away
    assert f"a resume runs the {status.left}" in status.message
    cancelled_report = reconcile(job)
    assert len(cancelled_report.missing) == status.left > 0  # to be resumed

    # 4. Resume by job id finishes the job.
    result = run_cli("resume", job.job_id)
    assert result.returncode == 0, result.stderr[-2000:]
    ids = success_ids(job)
    assert sorted(ids) == [f"q{i:03d}" for i in range(COUNT)]  # none missing, none twice
    final = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["custom_id"] for x in final] == [f"q{i:03d}" for i in range(COUNT)]
    assert verify(job).ok
    assert job.read_status().succeeded == COUNT
