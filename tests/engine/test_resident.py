"""The resident worker on the real engine: a job on a loaded model runs without loading it,
an embedding model loads beside the chat model, ``engine unload|stop`` free the models, a
memory budget set while the worker runs unloads the least recently used, and a typed text
is embedded by the warm embedding model with a batch job's vectors. (kill -9 of the
resident worker mid-job: tests/engine/test_faults.py.)

Speed figures (submit to result, cold and warm) are measured in ``bench/warm.py``; these
tests check what a user notices whatever the machine's load: no second model load, the
same worker, the same vectors.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from core.config import default_embedding_model_dir
from core.jobs.engine_files import IDLE_ENV, read_settings, read_state, write_settings
from core.jobs.folder import JobFolder, list_jobs
from core.jobs.submit import Submission, submit
from core.schemas import EngineConfig, worker_alive
from core.store.text_query import embed_texts
from tests.support.cli import run_cli

pytestmark = pytest.mark.engine
IDLE = "300"  # long enough to outlast each test; every test stops its worker


def chat_lines(path: Path, n: int, topic: str, max_tokens: int = 8) -> Path:
    path.write_text(
        "".join(
            json.dumps(
                {
                    "custom_id": f"{topic}-{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {
                        "model": "m",
                        "messages": [{"role": "user", "content": f"Say {topic} {i}."}],
                        "max_tokens": max_tokens,
                        "temperature": 0,
                    },
                }
            )
            + "\n"
            for i in range(n)
        )
    )
    return path


def wait_for(condition, seconds: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds:.0f} s: {what}")


def stop_resident(home: Path) -> None:
    """Ends the test's resident worker, whatever happened (never left running)."""
    state = read_state(home)
    if state is not None:
        os.kill(state.pid, signal.SIGKILL)


def job_of(home: Path, source: str) -> JobFolder:
    return next(j for j in list_jobs(home / "jobs") if source in j.read_spec().source)


def embedding_lines(path: Path, model: Path, n: int = 2) -> Path:
    rows = [
        {
            "custom_id": f"e{i}",
            "method": "POST",
            "url": "/v1/embeddings",
            # Texts of this file alone: a file's vectors made before would be reused.
            "body": {"model": model.name, "input": f"Ticket {i} ({path.stem}): refund my order."},
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run_ok(batch: Path) -> None:
    """``core run`` of a batch file, its output beside it; the run must succeed."""
    done = run_cli("run", str(batch), "-o", str(batch.with_suffix(".out")))
    assert done.returncode == 0, done.stderr[-2000:]


# Whether a second model loads beside the first is the machine's free RAM (core/run/pool.py):
# beside the other units' engines and Ray replicas in phase 1 it found no room in CI.
@pytest.mark.serial
def test_models_stay_loaded_between_jobs_and_a_budget_set_on_the_running_worker_unloads_the_lru(
    studio_home, tmp_path, default_model, embedding_model, monkeypatch, no_warm_worker
):
    # Cold start: it measures a first load, sees exactly which models the worker holds,
    # unloads them and stops the worker. (kill -9 of the resident worker mid-job, then a
    # resume losing nothing and none of its engine's processes outliving it:
    # tests/engine/test_faults.py, on the warm worker.)
    monkeypatch.setenv(IDLE_ENV, IDLE)
    try:
        cold = run_cli(
            "run",
            str(chat_lines(tmp_path / "cold.jsonl", 1, "cold")),
            "-o",
            str(tmp_path / "c.out"),
        )
        assert cold.returncode == 0, cold.stderr[-2000:]
        first = job_of(studio_home, "cold").read_status()
        assert first.model_load_seconds and first.model_load_seconds > 0
        state = read_state(studio_home)  # the worker stays, the model loaded
        assert state is not None and state.pid == first.pid and state.state == "idle"
        assert [m.name for m in state.models] == [default_model.name]
        assert state.models[0].memory_mib > 100

        # Through the app's door (what the Run page and the Batch API call).
        started = submit(
            chat_lines(tmp_path / "app.jsonl", 1, "app"),
            Submission(engine=EngineConfig(model=str(default_model))),
        )
        wait_for(lambda: started.job.read_status().is_final, 120, "the warm job ended")
        warm = started.job.read_status()
        assert warm.state == "completed" and warm.pid == first.pid
        assert warm.model_load_seconds == 0  # no load: the model was warm
        assert started.worker is None  # no second worker beside the one holding the engine
        # Through the CLI.
        again = run_cli(
            "run", str(chat_lines(tmp_path / "cli.jsonl", 1, "cli")), "-o", str(tmp_path / "l.out")
        )
        assert again.returncode == 0, again.stderr[-2000:]
        cli = job_of(studio_home, "cli").read_status()
        assert cli.pid == first.pid and cli.model_load_seconds == 0

        # An embedding job loads beside the chat model; a chat job after it reloads nothing.
        run_ok(embedding_lines(tmp_path / "e1.jsonl", embedding_model))
        both = read_state(studio_home)  # both loaded, each with its memory
        assert both is not None and both.pid == first.pid
        assert {m.name: m.kind for m in both.models} == {
            default_model.name: "chat",
            embedding_model.name: "embedding",
        }, f"{psutil.virtual_memory().available >> 20} MiB available now"  # room beside?
        assert all(m.memory_mib > 100 for m in both.models), both.models
        listed = run_cli("engine", "status").stdout
        assert default_model.name in listed and embedding_model.name in listed
        run_ok(chat_lines(tmp_path / "warm-chat.jsonl", 1, "two"))
        warm_chat = job_of(studio_home, "warm-chat").read_status()
        assert warm_chat.model_load_seconds == 0 and warm_chat.pid == first.pid  # no reload

        # engine unload, from a shell: the embedding model goes, the chat model stays.
        unloaded = run_cli("engine", "unload", embedding_model.name)
        assert unloaded.returncode == 0 and "unloaded" in unloaded.stdout
        state = read_state(studio_home)
        assert state is not None and [m.name for m in state.models] == [default_model.name]

        # Room for one model only, set in Settings while the worker runs (it reads the
        # budget at each load): the embedding job unloads the chat model first.
        chat_mib, embedding_mib = (next(m.memory_mib for m in both.models if m.kind == kind)
                                   for kind in ("chat", "embedding"))  # fmt: skip
        budget = round(chat_mib + embedding_mib / 2)
        write_settings(studio_home, read_settings(studio_home).model_copy(
            update={"memory_mib": budget}))  # fmt: skip
        run_ok(embedding_lines(tmp_path / "e2.jsonl", embedding_model))
        state = read_state(studio_home)
        assert state is not None and state.pid == first.pid  # no restart to set it
        assert [m.name for m in state.models] == [embedding_model.name]
        assert job_of(studio_home, "e2").read_status().model_load_seconds > 0  # loaded again

        # Unload the last model, then stop the worker, from a shell.
        unloaded = run_cli("engine", "unload", embedding_model.name)
        assert unloaded.returncode == 0 and "unloaded" in unloaded.stdout
        assert read_state(studio_home).models == []
        listed = run_cli("engine", "status")
        assert "no model loaded" in listed.stdout
        stopped = run_cli("engine", "stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert not worker_alive(state.pid) and read_state(studio_home) is None
    finally:
        stop_resident(studio_home)


def test_a_typed_text_is_embedded_by_the_warm_model_with_a_batch_jobs_vectors(
    warm_home, tmp_path, embedding_model
):
    texts = ["Please refund the duplicate payment.", "A cat sat on the mat."]
    batch = tmp_path / "texts.jsonl"
    batch.write_text(
        "".join(
            json.dumps(
                {
                    "custom_id": f"t{i}",
                    "method": "POST",
                    "url": "/v1/embeddings",
                    "body": {"model": embedding_model.name, "input": text},
                }
            )
            + "\n"
            for i, text in enumerate(texts)
        )
    )
    out = tmp_path / "out.jsonl"
    # Computed now (not an earlier test's vectors reused), so the worker holds the model.
    result = run_cli("run", str(batch), "-o", str(out), "--no-reuse")
    assert result.returncode == 0, result.stderr[-2000:]
    by_id = {line["custom_id"]: line for line in map(json.loads, out.read_text().splitlines())}
    batch_vectors = np.array(
        [by_id[f"t{i}"]["response"]["body"]["data"][0]["embedding"] for i in range(2)]
    )
    worker = read_state(warm_home)
    assert worker is not None
    [loaded] = [m for m in worker.models if m.name == embedding_model.name]
    assert loaded.kind == "embedding"

    typed = embed_texts(default_embedding_model_dir(), texts)
    cosines = (typed * batch_vectors).sum(1) / (
        np.linalg.norm(typed, axis=1) * np.linalg.norm(batch_vectors, axis=1)
    )
    assert cosines.min() >= 0.9999, cosines
    again = embed_texts(default_embedding_model_dir(), ["Another text entirely."])
    assert again.shape == (1, 384)
    after = read_state(warm_home)  # the same worker, the model loaded once
    assert after is not None and after.pid == worker.pid
    assert [m.loaded_at for m in after.models if m.name == embedding_model.name] == [
        loaded.loaded_at
    ]
