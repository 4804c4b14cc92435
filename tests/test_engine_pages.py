"""The engine on the pages, driven by ``AppTest`` from a state file a resident worker would
write (the real worker: tests/test_resident.py)."""

from __future__ import annotations

import os
import time

from core.run.engine_files import (
    IDLE_ENV,
    EngineState,
    LoadedModel,
    idle_seconds,
    take_commands,
    write_state,
)
from tests.test_pages import open_page, shown


def resident_state(home, pid: int | None = None, **changes) -> EngineState:
    now = time.time()
    state = EngineState(
        pid=pid or os.getpid(),  # a live process, as the worker is
        state="idle",
        models=[
            LoadedModel(
                model="/models/SmolLM2-135M-Instruct",
                name="SmolLM2-135M-Instruct",
                kind="chat",
                memory_mib=1650.0,
                load_seconds=4.2,
                loaded_at=now - 60,
                last_used=now - 5,
            )
        ],
        idle_seconds=600,
        idle_since=now - 5,
        rss_mib=2300.0,
        updated_at=now,
        **changes,
    )
    write_state(home, state)
    return state


def page_text(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    return shown("\n".join(parts))


def test_settings_lists_the_loaded_models_and_unloads_one(studio_home, monkeypatch):
    monkeypatch.delenv(IDLE_ENV)
    resident_state(studio_home)
    at = open_page("settings.py")
    text = page_text(at)
    assert "SmolLM2-135M-Instruct" in text and "1,650 MiB" in text and "idle" in text
    unload = next(b for b in at.button if b.label == "Unload")
    unload.click().run()
    commands = take_commands(studio_home)
    assert [(c.action, c.model) for c in commands] == [("unload", "/models/SmolLM2-135M-Instruct")]


def test_settings_sets_how_long_models_stay_loaded(studio_home, monkeypatch):
    monkeypatch.delenv(IDLE_ENV)
    at = open_page("settings.py")
    field = next(n for n in at.number_input if n.label.startswith("Keep models loaded"))
    assert field.value == 600
    field.set_value(120).run()
    assert idle_seconds(studio_home) == 120


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
