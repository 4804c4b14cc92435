"""The unit tests of tests/pages/test_engine_pages.py (split from it by kind; docs/tests.md).

The engine on the pages, driven by ``AppTest`` from a state file a resident worker would
write (the real worker: tests/engine/test_resident.py)."""

from __future__ import annotations

import os
import time

from core.jobs.engine_files import (
    take_commands,
)
from tests.support.engine_pages import resident_state


def test_the_estimate_counts_no_load_for_the_model_the_resident_worker_holds(studio_home):
    from core.jobs.queue import models_loaded

    assert models_loaded(studio_home / "jobs") == frozenset()
    resident_state(studio_home)
    assert models_loaded(studio_home / "jobs") == {"SmolLM2-135M-Instruct"}


def test_tokens_per_s_counts_from_the_first_token_not_a_window_before_it():
    from core.run.monitoring import rates
    from core.schemas import JobStatus

    # 10 s of prompts, then 200 tokens/s for 20 s, then 50/s for the last 10 s.
    samples = [
        {"t": 0.0, "done": 0, "output_tokens": 0},
        {"t": 10.0, "done": 0, "output_tokens": 0},
        {"t": 12.0, "done": 0, "output_tokens": 100},  # the first tokens
        {"t": 22.0, "done": 0, "output_tokens": 2_100},
        {"t": 32.0, "done": 0, "output_tokens": 4_100},
        {"t": 42.0, "done": 0, "output_tokens": 4_600},
    ]
    status = JobStatus(state="running", pid=os.getpid(), heartbeat_at=time.time(), total=9)
    # What the engine made since its first token, over the time since: 4,500 in 30 s.
    assert rates(samples, status).tokens_per_s == 150.0


def test_engine_status_and_a_refused_unload_from_a_shell(studio_home):
    import json

    from tests.support.cli import cli

    assert "no engine is loaded" in cli("engine", "status").stdout
    resident_state(studio_home)
    shown = cli("engine", "status")
    assert "SmolLM2-135M-Instruct (chat): 1,650 MiB" in shown.stdout
    assert json.loads(cli("engine", "status", "--json").stdout)["models"][0]["kind"] == "chat"
    refused = cli("engine", "unload", "Qwen-7B")
    assert refused.returncode == 1 and "Qwen-7B is not loaded" in refused.stderr
    assert take_commands(studio_home) == []  # nothing sent
