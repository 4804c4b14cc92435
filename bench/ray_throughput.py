"""Rows/s for one generated file: local worker, Ray with one replica, Ray with two replicas
on two simulated nodes (``ray.cluster_utils.Cluster``, one CPU and a ``slot`` each).

    .venv/bin/python bench/ray_throughput.py [--rows 64] [--max-tokens 32]

Each run is ``python -m core run`` as a user types it (own data folder). Printed per run:
the command's wall time, the time from the worker starting to run until the job finished
(without Python/Ray start and model loading), and rows/s for both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scratch import scratch_folder  # noqa: E402


def make_file(path: Path, rows: int, max_tokens: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(rows):
            body = {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": f"Write a sentence about item {i}."}],
                "max_tokens": max_tokens,
                "temperature": 0,
            }
            line = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}) + "\n")


def run(label: str, batch: Path, home: Path, extra: list[str], rows: int) -> dict:
    env = {**os.environ, "BATCH_STUDIO_HOME": str(home / label), "RAY_AUTH_MODE": "disabled"}
    out = home / f"{label}.jsonl"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "core", "run", str(batch), "-o", str(out), *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{label} failed: {done.stderr[-2000:]}")
    job = next(p for p in (home / label / "jobs").iterdir() if (p / "job.json").is_file())
    status = json.loads((job / "status.json").read_text())
    running = next(h["at"] for h in status["history"] if h["state"] == "running")
    run_s = (
        datetime.fromisoformat(status["finished_at"]) - datetime.fromisoformat(running)
    ).total_seconds()
    return {
        "run": label,
        "wall_s": round(wall, 1),
        "rows_per_s_wall": round(rows / wall, 2),
        "running_s": round(run_s, 1),
        "rows_per_s_running": round(rows / run_s, 2),
        "output_tokens": status["completion_tokens"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    os.environ["RAY_AUTH_MODE"] = "disabled"
    from ray.cluster_utils import Cluster

    home = scratch_folder("ray-bench-")
    batch = home / "batch.jsonl"
    make_file(batch, args.rows, args.max_tokens)
    results = [run("local", batch, home, [], args.rows)]
    results.append(
        run("ray-1-replica", batch, home, ["--ray", "local", "--replica-cpus", "2"], args.rows)
    )
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"slot": 1}}
    )
    try:
        cluster.add_node(num_cpus=1, resources={"slot": 1})
        cluster.wait_for_nodes()
        two = ["--ray", cluster.address, "--replicas", "2", "--replica-resources", '{"slot": 1}']
        results.append(run("ray-2-replicas-2-nodes", batch, home, two, args.rows))
    finally:
        cluster.shutdown()
    print(f"{args.rows} rows, max_tokens {args.max_tokens}, temperature 0")
    for result in results:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
