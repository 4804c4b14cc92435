"""Jobs side by side on the real engine (issue 41 item 1): the session's warm worker runs
a small job beside a long one on the same loaded model, and a cancel stops one job alone.
(A kill -9 of the worker with three jobs running, each resumed whole: tests/engine/test_faults.py,
the run's one kill of the warm worker.)"""

import json
import uuid

import pytest

from core.jobs.folder import cancel, create_job, start_worker
from core.jobs.ledger import reconcile
from core.schemas import EngineConfig, JobStatus
from tests.support.warm_engine import wait_until

pytestmark = pytest.mark.engine


def batch(path, count, max_tokens):
    """Chats of this file alone (a fresh word in each prompt: nothing is reused), their
    ``max_tokens`` taken in turn from ``max_tokens``. Requests in one engine step end
    together: two lengths make a job whose first results come long before its last."""
    nonce = uuid.uuid4().hex[:8]
    lines = []
    for i in range(count):
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": f"Tell a story about {nonce} {i}."}],
            "max_tokens": max_tokens[i % len(max_tokens)],
            "temperature": 0,
        }
        lines.append({"custom_id": f"{path.stem}-{i}", "method": "POST",
                      "url": "/v1/chat/completions", "body": body})  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def started(tmp_path, home, model, name, count, max_tokens=(48,)):
    job = create_job(
        batch(tmp_path / f"{name}.jsonl", count, max_tokens),
        home / "jobs",
        EngineConfig(model=str(model)),
    )
    start_worker(job)
    return job


def test_a_small_job_finishes_while_a_long_one_runs_and_both_are_whole(
    warm_home, tmp_path, default_model
):
    # 80 answers of 64 tokens: the small job's dozen 8-token answers end some 50 engine
    # steps before the long job's last.
    long = started(tmp_path, warm_home, default_model, "long", 160, max_tokens=(8, 64))
    # a cold worker's load took 4.5 min beside other engine tests on the 2-core machine
    wait_until(long, lambda s: s.state == "running" and s.done > 0, timeout=900)
    small = started(tmp_path, warm_home, default_model, "small", 12, max_tokens=(8,))

    live: list[int] = []  # the small job's tokens as Monitor shows them while it runs

    def ended(status: JobStatus) -> bool:
        if status.state == "running":
            live.append(status.generated_tokens)
        return status.is_final

    small_status = wait_until(small, ended, timeout=120)

    assert (small_status.state, small_status.succeeded) == ("completed", 12)
    # Its own tokens, never the long job's it shares the engine with: at most 12 x 8.
    assert live and max(live) <= 12 * 8, live
    assert not long.read_status().is_final  # before the long job ends, not after it
    long_status = wait_until(long, lambda s: s.is_final, timeout=600)
    assert (long_status.state, long_status.succeeded) == ("completed", 160)
    assert reconcile(long).complete and reconcile(small).complete  # one line per custom_id
    assert small_status.pid == long_status.pid  # one worker, one engine, side by side


def test_a_cancel_of_one_of_two_running_jobs_leaves_the_other_completing(
    warm_home, tmp_path, default_model
):
    doomed = started(tmp_path, warm_home, default_model, "doomed", 400)
    other = started(tmp_path, warm_home, default_model, "other", 40, max_tokens=(16,))
    wait_until(doomed, lambda s: s.state == "running", timeout=900)
    beside = wait_until(other, lambda s: s.state == "running" or s.is_final)
    assert beside.state == "running"  # both running at once

    assert "cancelling" in cancel(doomed)
    stopped = wait_until(doomed, lambda s: s.is_final, timeout=120)
    kept = wait_until(other, lambda s: s.is_final, timeout=300)

    assert stopped.state == "cancelled" and stopped.done < 400
    assert "asked to stop" not in stopped.message  # a cancel of this job, not the worker's end
    assert (kept.state, kept.succeeded) == ("completed", 40) and reconcile(other).complete
    made = reconcile(doomed)  # what it made stays, once each; a resume runs the rest
    assert not made.duplicates and len(made.missing) == 400 - stopped.done
