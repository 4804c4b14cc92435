"""What the tests split from tests/pages/test_engine_pages.py by kind share (docs/tests.md)."""

from __future__ import annotations

import os
import time

from core.jobs.engine_files import (
    EngineState,
    LoadedModel,
    write_state,
)


def resident_state(home, **changes) -> EngineState:
    now = time.time()
    fields = {
        "pid": os.getpid(),  # a live process, as the worker is
        "state": "idle",
        "models": [
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
        "idle_seconds": 600,
        "idle_since": now - 5,
        "rss_mib": 2300.0,
        "updated_at": now,
    }
    state = EngineState(**(fields | changes))
    write_state(home, state)
    return state
