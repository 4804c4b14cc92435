"""The Batch API's costs: a batch through /v1 against ``core run``, pollers, a big upload.

Usage::

    .venv/bin/python bench/api.py [--requests 256] [--max-tokens 16] [--pollers 50] \
        [--upload-mb 200]

Starts ``python -m core serve`` on a free port with a scratch data folder, then prints:

1. end-to-end seconds of the same chat file through the API (upload, create, poll every
   0.5 s, download) and through ``python -m core run`` (both load the model once);
2. while the same file runs through the API again, ``--pollers`` clients each calling
   ``GET /v1/batches/{id}`` in a loop: their p50/p99 latency, and the job's run time
   (``status.json``'s ``elapsed_seconds``) against the first API run's;
3. the server's resident memory before, at its peak during, and after a ``--upload-mb``
   upload (sampled every 20 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scratch import scratch_folder  # noqa: E402
from tests.browser_support import free_port  # noqa: E402

FINAL = {"completed", "failed", "cancelled", "expired"}


def make_batch(path: Path, count: int, max_tokens: int) -> None:
    rng = random.Random(0)
    topics = ["a refund", "a login problem", "a late delivery", "an invoice", "an export"]
    with path.open("w") as out:
        for i in range(count):
            body = {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": f"Reply to {rng.choice(topics)}."}],
                "max_tokens": max_tokens,
                "temperature": 0,
            }
            line = {"custom_id": f"c{i:04d}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}) + "\n")


def start_server(home: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "BATCH_STUDIO_HOME": str(home)}
    log = (home.parent / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "core", "serve", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/_stcore/health").text == "ok":
                return server
        except httpx.HTTPError:
            time.sleep(0.3)
    server.kill()
    raise SystemExit("core serve did not start in 90 s")


def through_api(api: httpx.Client, batch: Path) -> tuple[float, str]:
    """Seconds from upload to downloaded output, and the batch id."""
    started = time.perf_counter()
    with batch.open("rb") as handle:
        file_id = api.post("/files", files={"file": handle}, data={"purpose": "batch"}).json()["id"]
    body = {
        "input_file_id": file_id,
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }
    created = api.post("/batches", json=body).json()
    while True:
        state = api.get(f"/batches/{created['id']}").json()
        if state["status"] in FINAL:
            break
        time.sleep(0.5)
    assert state["status"] == "completed", state
    api.get(f"/files/{state['output_file_id']}/content").raise_for_status()
    return time.perf_counter() - started, created["id"]


def through_cli(home: Path, batch: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "core", "run", str(batch), "-o", str(batch.with_suffix(".out"))],
        cwd=REPO,
        env={**os.environ, "BATCH_STUDIO_HOME": str(home)},
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def elapsed(home: Path, job_id: str) -> float:
    return json.loads((home / "jobs" / job_id / "status.json").read_text())["elapsed_seconds"]


def with_pollers(
    base: str, api: httpx.Client, batch: Path, pollers: int
) -> tuple[list[float], str]:
    """Runs the batch while ``pollers`` clients poll it; their latencies (ms) and the id."""
    with batch.open("rb") as handle:
        file_id = api.post("/files", files={"file": handle}, data={"purpose": "batch"}).json()["id"]
    body = {
        "input_file_id": file_id,
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }
    batch_id = api.post("/batches", json=body).json()["id"]
    latencies: list[float] = []
    done = threading.Event()
    lock = threading.Lock()

    def poll() -> None:
        with httpx.Client(base_url=base, timeout=30) as own:
            while not done.is_set():
                started = time.perf_counter()
                state = own.get(f"/batches/{batch_id}").json()["status"]
                with lock:
                    latencies.append((time.perf_counter() - started) * 1000)
                if state in FINAL:
                    done.set()
                time.sleep(0.1)  # a client that polls ten times a second

    threads = [threading.Thread(target=poll) for _ in range(pollers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, batch_id


def upload_memory(base: str, server: psutil.Process, megabytes: int, folder: Path) -> None:
    big = folder / "big.jsonl"
    line = (json.dumps({"custom_id": "x" * 20, "body": {"text": "y" * 900}}) + "\n").encode()
    with big.open("wb") as out:
        for _ in range(megabytes * 1_000_000 // len(line)):
            out.write(line)
    size = big.stat().st_size
    before = server.memory_info().rss
    peak, stop = [before], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak.append(server.memory_info().rss)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    with httpx.Client(base_url=base, timeout=600) as api, big.open("rb") as handle:
        reply = api.post("/files", files={"file": handle}, data={"purpose": "batch"})
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    after = server.memory_info().rss
    assert reply.status_code == 200, reply.text
    mib = 1 << 20
    print(
        f"upload of {size / 1e6:.0f} MB in {seconds:.1f} s: server RSS {before / mib:.0f} MiB "
        f"before, {max(peak) / mib:.0f} MiB peak (+{(max(peak) - before) / mib:.0f}), "
        f"{after / mib:.0f} MiB after"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--pollers", type=int, default=50)
    parser.add_argument("--upload-mb", type=int, default=200)
    parser.add_argument(
        "--parts", default="runs,pollers,upload", help="which figures (comma-separated)"
    )
    args = parser.parse_args()

    work = scratch_folder("api-bench-")
    home = work / "home"
    batch = work / "chats.jsonl"
    make_batch(batch, args.requests, args.max_tokens)
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    server = start_server(home, port)
    try:
        process = psutil.Process(server.pid)
        parts = set(args.parts.split(","))
        with httpx.Client(base_url=base, timeout=60) as api:
            if "runs" in parts or "pollers" in parts:
                api_seconds, first = through_api(api, batch)
            if "runs" in parts:
                cli_seconds = through_cli(home, batch)
                print(
                    f"{args.requests} chats ({args.max_tokens} tokens): API end-to-end "
                    f"{api_seconds:.1f} s, core run {cli_seconds:.1f} s "
                    f"({(api_seconds / cli_seconds - 1) * 100:+.1f} %)"
                )
            if "pollers" in parts:
                latencies, polled = with_pollers(base, api, batch, args.pollers)
                cuts = statistics.quantiles(latencies, n=100)
                print(
                    f"{args.pollers} pollers, {len(latencies)} polls: p50 {cuts[49]:.1f} ms, "
                    f"p99 {cuts[98]:.1f} ms; the job ran {elapsed(home, polled):.1f} s "
                    f"with them, {elapsed(home, first):.1f} s without"
                )
        if "upload" in parts:
            upload_memory(base, process, args.upload_mb, work)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
