"""The engine on the pages, driven by ``AppTest`` from a state file a resident worker would
write (the real worker: tests/engine/test_resident.py)."""

from __future__ import annotations

import os
import time

from core.jobs.engine_files import (
    BUDGET_ENV,
    IDLE_ENV,
    RUNNING_ENV,
    LoadedModel,
    idle_seconds,
    memory_budget_mib,
    running_jobs_cap,
    take_commands,
)
from tests.support.engine_pages import answering_worker, resident_state
from tests.support.pages import open_page, shown


def page_text(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    return shown("\n".join(parts))


def test_settings_lists_the_loaded_models_and_unloads_one(studio_home, monkeypatch):
    monkeypatch.delenv(IDLE_ENV)
    state = resident_state(studio_home)
    embedder = LoadedModel(  # loaded beside the chat model
        model="/models/all-MiniLM-L6-v2",
        name="all-MiniLM-L6-v2",
        kind="embedding",
        memory_mib=2730.0,
        load_seconds=9.1,
        loaded_at=time.time(),
        last_used=time.time(),
    )
    resident_state(studio_home, models=[*state.models, embedder])
    at = open_page("settings.py")
    text = page_text(at)
    assert "SmolLM2-135M-Instruct" in text and "1,650 MiB" in text and "idle" in text
    assert "all-MiniLM-L6-v2" in text and "2,730 MiB" in text
    unloads = [b for b in at.button if b.label == "Unload"]
    assert len(unloads) == 2
    unloads[1].click().run()
    commands = take_commands(studio_home)
    assert [(c.action, c.model) for c in commands] == [("unload", "/models/all-MiniLM-L6-v2")]


def test_settings_stop_says_it_stops_at_once_then_that_it_stopped(studio_home):
    """Issue 58, item 14: Stop the engine said nothing and offered itself again until a
    reload; now the page drawn at once says it stops, offers no button meanwhile, and says
    when the worker has exited."""
    state = resident_state(studio_home)
    at = open_page("settings.py")
    next(b for b in at.button if b.label == "Stop the engine").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert [shown(i.value) for i in at.info] == [
        f"Stopping the engine: worker pid {state.pid} unloads every model and exits (after "
        "the job it runs now, if any)…"
    ]
    assert not [b for b in at.button if b.label in ("Stop the engine", "Unload")]
    assert [c.action for c in take_commands(studio_home)] == ["stop"]  # sent once

    resident_state(studio_home, pid=2**22 + 12345)  # the worker has exited
    at.run()
    assert [shown(s.value) for s in at.success] == [
        f"The engine stopped: worker pid {state.pid} has exited."
    ]
    assert "no engine is loaded" in page_text(at)
    assert not at.info


def test_settings_sets_how_long_models_stay_loaded(studio_home, monkeypatch):
    monkeypatch.delenv(IDLE_ENV)
    at = open_page("settings.py")
    field = next(n for n in at.number_input if n.label.startswith("Keep models loaded"))
    assert field.value == 600
    field.set_value(120).run()
    assert idle_seconds(studio_home) == 120


def test_settings_sets_the_memory_the_loaded_models_may_hold_keeping_the_idle_time(
    studio_home, monkeypatch
):
    monkeypatch.delenv(IDLE_ENV)
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    at = open_page("settings.py")
    field = next(n for n in at.number_input if n.label.startswith("Memory the loaded models"))
    assert field.value == 0 and memory_budget_mib(studio_home) is None  # no cap by default
    field.set_value(2048).run()
    assert memory_budget_mib(studio_home) == 2048  # what the running worker reads next
    idle = next(n for n in at.number_input if n.label.startswith("Keep models loaded"))
    idle.set_value(120).run()
    assert idle_seconds(studio_home) == 120 and memory_budget_mib(studio_home) == 2048
    monkeypatch.setenv(BUDGET_ENV, "1024")
    at = open_page("settings.py")
    field = next(n for n in at.number_input if n.label.startswith("Memory the loaded models"))
    assert field.disabled and field.value == 1024 and BUDGET_ENV in page_text(at)


def test_settings_sets_how_many_jobs_run_side_by_side(studio_home, monkeypatch):
    monkeypatch.delenv(RUNNING_ENV, raising=False)
    at = open_page("settings.py")
    field = next(n for n in at.number_input if n.label.startswith("Jobs running side by side"))
    assert field.value == 4 and running_jobs_cap(studio_home) == 4
    field.set_value(1).run()
    assert running_jobs_cap(studio_home) == 1  # one after another, as before
    monkeypatch.setenv(RUNNING_ENV, "2")
    at = open_page("settings.py")
    field = next(n for n in at.number_input if n.label.startswith("Jobs running side by side"))
    assert field.disabled and field.value == 2 and RUNNING_ENV in page_text(at)


def test_settings_says_when_serve_sets_the_idle_time(studio_home, monkeypatch):
    monkeypatch.setenv(IDLE_ENV, "30")
    at = open_page("settings.py")
    field = next(n for n in at.number_input if n.label.startswith("Keep models loaded"))
    assert field.disabled and field.value == 30
    assert "--engine-idle" in page_text(at)


def test_settings_says_no_engine_is_loaded_without_a_live_worker(studio_home):
    resident_state(studio_home, pid=2**22 + 12345)  # no such process
    at = open_page("settings.py")
    assert "no engine is loaded" in page_text(at)
    assert not [b for b in at.button if b.label == "Unload"]


def test_the_monitor_shows_the_engines_own_numbers_while_a_job_runs(studio_home):
    import json

    from core.schemas import JobStatus
    from tests.support.jobs import monitored_job
    from tests.support.pages import metric

    job = monitored_job(studio_home)
    resident_state(studio_home, state="running", job_id=job.job_id, idle_since=None)
    now = time.time()
    engine = {"running": 12, "waiting": 3, "kv_cache_usage": 0.374, "prefix_cache_hit_rate": 0.5}
    samples = [
        {"t": now - age, "done": 0, "output_tokens": tokens, "engine": engine}
        for age, tokens in ((20, 0), (10, 300), (0, 1_300))
    ]
    job.metrics.write_text("".join(json.dumps(s) + "\n" for s in samples))
    job.write_status(
        JobStatus(
            state="running",
            pid=os.getpid(),
            heartbeat_at=now,
            total=200,
            generated_tokens=1_300,
            model_load_seconds=0.0,
        )
    )
    at = open_page("monitor.py", job_id=job.job_id)
    assert metric(at, "KV cache used") == "37%"
    assert (metric(at, "Requests running"), metric(at, "Requests waiting")) == ("12", "3")
    assert metric(at, "Prefix-cache hits") == "50%"
    assert "Engine: SmolLM2-135M-Instruct (1,650 MiB) loaded" in page_text(at)
    assert "running beside" not in page_text(at)  # alone on the engine
    resident_state(studio_home, state="running", job_id=job.job_id, job_ids=[job.job_id, "job_b"])
    at = open_page("monitor.py", job_id=job.job_id)
    said = "Engine: SmolLM2-135M-Instruct (1,650 MiB) loaded; running beside this job: job_b"
    assert said in page_text(at)
    assert metric(at, "Output tokens/s") == "100"  # since the first token: 1,000 in 10 s
    assert metric(at, "Model load") == "warm"  # the engine held the model


def test_settings_says_which_model_a_running_job_keeps_loaded_and_what_a_stop_waits_for(
    studio_home,
):
    """Issue 41: the buttons show the worker's answer (core.run.resident's rule, tested
    with the worker in tests/unit/test_side_by_side.py)."""
    model = resident_state(studio_home).models[0].model_copy(update={"job_ids": ["job_a"]})
    state = resident_state(studio_home, state="running", job_ids=["job_a"], models=[model])
    with answering_worker(studio_home):
        at = open_page("settings.py")
        assert "**SmolLM2-135M-Instruct** (chat) — in use by job_a" in page_text(at)
        next(b for b in at.button if b.label == "Unload").click().run()
        assert [shown(t.value) for t in at.toast] == [
            "SmolLM2-135M-Instruct stays loaded: running job job_a uses it"
        ]
        next(b for b in at.button if b.label == "Stop the engine").click().run()
    assert [shown(i.value) for i in at.info] == [
        f"Stopping the engine: worker {state.pid} is stopping after 1 running job: job_a; it "
        "starts no new job, then unloads every model and exits…"
    ]
