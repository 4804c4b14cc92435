"""What the tests split from tests/pages/test_engine_pages.py by kind share (docs/tests.md)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from core.jobs.engine_files import (
    EngineAnswer,
    EngineState,
    LoadedModel,
    answer_command,
    read_state,
    take_commands,
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


@contextmanager
def answering_worker(home) -> Iterator[None]:
    """A worker whose one job (the first of ``state.json``'s) uses every model it holds: it
    answers each command as the rule does then (core.run.resident), unloading nothing."""

    done = threading.Event()

    def answer() -> None:
        while not done.is_set():
            state = read_state(home)
            for command in take_commands(home):
                assert state is not None
                kept = {m.name: state.job_ids[:1] for m in state.models}
                running = state.job_ids if command.action == "stop" else []
                reply = EngineAnswer(
                    action=command.action, kept=kept, running=running, pid=state.pid
                )
                answer_command(home, command, reply)
            time.sleep(0.02)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
