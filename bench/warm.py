"""Benchmark: a warm engine against a cold one, from submit to the first result and to the end.

    .venv/bin/python bench/warm.py             # chat and embeddings, 1 and 100 lines
    .venv/bin/python bench/warm.py --idle 15   # how long the worker waits before it exits

In a fresh data folder, jobs go through ``submit()`` (the door the Run page and the Batch API
use) on the built-in chat model (16 tokens an answer) and the built-in embedding model: a
1-line and a 100-line batch each, cold (no worker: the model loads) and warm (the resident
worker holds it), timed from the call to ``submit()`` to the first result line on disk and to
the job's final status. A warm 1-line chat through the CLI is timed as a user's shell sees it
(Python's start included). "running" is the time from submit until the worker runs the job
(a cold one has loaded the model by then). Then typed texts embedded by the warm model
("similar to a typed text"), the idle worker's memory, and that it exits and frees it
after the idle time.
Targets on a 2-core CPU: a warm 1-line chat completes within 2.5 s of submit, its first
result within 1 s; a typed text under 300 ms once the model is loaded. The first result's
"(engine)" column is the engine's own time for that request (its ``latency_ms``), which no
studio change shortens: the first result's time less it is the studio's overhead.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def lines(path: Path, n: int, embedding: bool, tag: str) -> Path:
    rows = []
    for i in range(n):
        if embedding:
            body = {"model": "all-MiniLM-L6-v2", "input": f"Ticket {tag}-{i}: refund my order."}
            url = "/v1/embeddings"
        else:
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": f"Summarise ticket {tag}-{i}."}],
                "max_tokens": 16,
                "temperature": 0,
            }
            url = "/v1/chat/completions"
        rows.append({"custom_id": f"{tag}-{i}", "method": "POST", "url": url, "body": body})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def timed_job(
    home: Path, n: int, embedding: bool, tag: str
) -> tuple[float, float, float, float, float]:
    """Seconds from submit to the first result and to the end, the model load, from
    submit to the worker running the job (what a warm engine saves besides the load), and
    the engine's own time for the first result (its ``latency_ms``: from entering the
    engine to its last token; the rest of the first result's time is the studio's)."""
    from core.config import default_model_dir
    from core.jobs.submit import Submission, submit
    from core.schemas import EngineConfig

    batch = lines(home / f"{tag}.jsonl", n, embedding, tag)
    started, submitted = time.monotonic(), time.time()
    job = submit(batch, Submission(engine=EngineConfig(model=str(default_model_dir())))).job
    first = None
    while True:
        if first is None and job.output.exists() and job.output.stat().st_size > 0:
            first = time.monotonic() - started
        status = job.read_status()
        if status.is_final or status.interrupted:
            end = time.monotonic() - started
            assert status.state == "completed", (status.state, status.error)
            load = status.model_load_seconds or 0.0
            running = next(h["at"] for h in status.history if h["state"] == "running")
            picked = datetime.fromisoformat(running).timestamp() - submitted
            with job.output.open() as handle:
                engine = (json.loads(handle.readline()).get("latency_ms") or 0) / 1000
            return first if first is not None else end, end, load, picked, engine
        time.sleep(0.005)


def stop_engine(home: Path) -> None:
    from core.jobs.engine_files import read_state
    from core.schemas import worker_alive

    state = read_state(home)
    subprocess.run([sys.executable, "-m", "core", "engine", "stop"], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    while state is not None and worker_alive(state.pid):
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=15.0, help="the worker's idle seconds")
    args = parser.parse_args()
    import psutil

    home = Path(tempfile.mkdtemp(prefix="bench-warm-"))
    os.environ["BATCH_STUDIO_HOME"] = str(home)
    os.environ["BATCH_STUDIO_ENGINE_IDLE"] = str(args.idle)
    from core.jobs.engine_files import read_state
    from core.model_folders import prepare_default_model, prepare_embedding_model
    from core.schemas import worker_alive

    prepare_default_model()
    embedder = prepare_embedding_model()
    print(f"CPU: {os.cpu_count()} logical cores; load average {os.getloadavg()[0]:.1f} at start")
    print(
        f"{'batch':<26} {'first result':>12} {'(engine)':>8} {'completed':>10} "
        f"{'model load':>10} {'running':>8}"
    )
    results: dict[tuple[str, int, str], tuple[float, float, float, float, float]] = {}
    for kind in ("chat", "embeddings"):
        embedding = kind == "embeddings"
        for n in (1, 100):
            for phase in ("cold", "warm"):
                if phase == "cold":  # the warm run after it finds the model loaded
                    stop_engine(home)
                figures = timed_job(home, n, embedding, f"{kind[0]}{n}{phase}")
                results[(kind, n, phase)] = figures
                first, end, load, picked, engine = figures
                label = f"{kind} {n:>3} line(s), {phase}"
                print(
                    f"{label:<26} {first:>11.2f}s {engine:>7.2f}s {end:>9.2f}s {load:>9.1f}s "
                    f"{picked:>7.2f}s",
                    flush=True,
                )
    for kind in ("chat", "embeddings"):
        for n in (1, 100):
            cold, warm = results[(kind, n, "cold")], results[(kind, n, "warm")]
            print(
                f"{kind} {n} line(s): warm/cold to completion {warm[1] / cold[1]:.2f} "
                f"({cold[1] / warm[1]:.1f}x faster), to first result {warm[0] / cold[0]:.2f}"
            )
    first, _, _, _, engine = results[("chat", 1, "warm")]
    print(
        f"warm 1-line chat: first result {first:.2f} s = the engine's own {engine:.2f} s (its "
        f"16 tokens on this CPU) + the studio's {first - engine:.2f} s (submit, the worker "
        "taking the job, writing the result)"
    )

    # The chat model back in the engine, then a 1-line batch through the CLI, as a shell
    # sees it (Python's start and the file check included).
    timed_job(home, 1, False, "reload")
    batch = lines(home / "cli.jsonl", 1, False, "cli")
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "core", "run", str(batch), "-o", str(home / "o")],
                   cwd=ROOT, check=True, capture_output=True)  # fmt: skip
    print(f"CLI `core run` of 1 chat line, warm: {time.monotonic() - started:.2f} s wall")

    from core.store.text_query import embed_texts

    started = time.monotonic()
    embed_texts(embedder, ["The first typed text loads the model."])
    cold_text = time.monotonic() - started
    times = []
    for i in range(10):
        started = time.monotonic()
        embed_texts(embedder, [f"A typed text number {i} about a late delivery."])
        times.append(time.monotonic() - started)
    times.sort()
    print(
        f"typed text embedded: first {cold_text:.2f} s (the first call), then median "
        f"{times[len(times) // 2] * 1000:.0f} ms, worst {times[-1] * 1000:.0f} ms of 10"
    )

    state = read_state(home)
    assert state is not None
    print(f"idle worker pid {state.pid}: RSS {state.rss_mib:,.0f} MiB; models: " + ", ".join(
        f"{m.name} {m.memory_mib:,.0f} MiB" for m in state.models))  # fmt: skip
    available = psutil.virtual_memory().available
    started = time.monotonic()
    while worker_alive(state.pid):
        time.sleep(0.2)
    freed = (psutil.virtual_memory().available - available) / 2**20
    print(
        f"after the {args.idle:.0f} s idle time the worker exited ({time.monotonic() - started:.1f}"
        f" s after the last use); machine's available memory {freed:+,.0f} MiB (shared machine)"
    )
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    shutil.rmtree(home, ignore_errors=True)  # the worker is gone: nothing writes there now
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
