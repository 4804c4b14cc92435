"""The queue on the real engine: one worker runs the jobs, a model loaded once."""

import json
import time

import pytest

from core.jobs.folder import create_job, start_worker
from core.jobs.ledger import reconcile
from core.schemas import EngineConfig
from tests.support.warm_engine import wait_until

pytestmark = pytest.mark.engine


def batch(path, models, count):
    lines = []
    for i in range(count):
        body = {
            "model": models[i % len(models)],
            # Prompts of this file alone: answers made before would be reused (docs/reuse.md).
            "messages": [{"role": "user", "content": f"Name a fruit ({path.stem} {i})."}],
            "max_tokens": 6,
            "temperature": 0,
            # Seeded as the tool_auto test's lines on the same folder are: both jobs then run
            # on one engine of it (core.run.engine.fit_to_requests), not a load each.
            "seed": i,
        }
        lines.append({"custom_id": f"{path.stem}-{i}", "method": "POST",
                      "url": "/v1/chat/completions", "body": body})  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def wait_final(job, timeout=400):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = job.read_status()
        if status.is_final:
            return status
        time.sleep(0.5)
    raise AssertionError(f"{job.job_id} did not finish: {job.read_status()}")


def test_one_worker_runs_the_jobs_and_two_models_run_in_one_job(
    warm_home, tmp_path, default_model, hermes_model
):
    # A second model folder, so a second engine: the session's SmolLM2 with a tools
    # template (tests/support/tool_auto.py), which tests/engine/test_tool_auto_engine.py
    # runs on too, so the warm worker loads one extra model for both tests, not two.
    twin = hermes_model
    jobs_dir = warm_home / "jobs"
    ab = create_job(
        batch(tmp_path / "ab.jsonl", ["model-a", "model-b"], 8),
        jobs_dir,
        EngineConfig(model=str(default_model)),
        model_map={"model-b": str(twin)},
    )
    later = create_job(
        batch(tmp_path / "later.jsonl", ["model-b"], 4),
        jobs_dir,
        EngineConfig(model=str(twin)),
    )
    start_worker(ab)
    # Once a worker has taken the A/B job (it loads the twin for it), the engine is busy:
    # no second worker; the one holding it runs the later job, beside the first
    # (core.run.running).
    wait_until(ab, lambda s: s.state not in ("created", "queued"), timeout=120)
    second = start_worker(later)
    if second is not None:  # started before the first took the lock: it leaves the job
        assert second.wait(timeout=60) == 0

    ab_status, later_status = wait_final(ab), wait_final(later)

    assert (ab_status.state, ab_status.succeeded) == ("completed", 8)
    assert reconcile(ab).complete and reconcile(later).complete
    answers = [
        json.loads(x)["response"]["body"]["model"] for x in ab.output.read_text().splitlines()
    ]
    assert sorted(set(answers)) == sorted([default_model.name, twin.name])
    assert later_status.state == "completed"
    assert later_status.pid == ab_status.pid  # the same worker ran both jobs
    # One engine of the twin for both jobs: whichever asked second found it loaded.
    assert 0 in (ab_status.model_load_seconds, later_status.model_load_seconds)
