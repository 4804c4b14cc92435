"""Rows/s for one generated file: the local worker, then Ray on 1, 2 and 3 nodes simulated
on this machine (``ray.cluster_utils.Cluster``, one CPU and a ``slot`` each, one replica per
node), then a 3-node run with 2 replicas that loses a replica's node mid-job.

    .venv/bin/python bench/ray_throughput.py [--rows 48] [--max-tokens 16]

Each run is ``python -m core run`` as a user types it (own data folder). Printed per run:
the command's wall time, the time from the worker starting to run until the job finished
(without Python/Ray start and model loading), rows/s for both, and each run's overhead
against the local run. The node-loss run also prints the recovery: seconds from the kill
until Ray had restarted the lost replica elsewhere (the job's ``ray.json`` event), and
until that replica handed back its next shard. Simulated nodes share this machine's
cores: the figures show the cluster path's overhead, not a cluster's speed-up.
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

SLOT = {"slot": 1}


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


def start(label: str, batch: Path, home: Path, extra: list[str]) -> subprocess.Popen:
    env = {**os.environ, "BATCH_STUDIO_HOME": str(home / label), "RAY_AUTH_MODE": "disabled"}
    out = home / f"{label}.jsonl"
    command = [sys.executable, "-m", "core", "run", str(batch), "-o", str(out), *extra]
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def job_folder(home: Path, label: str) -> Path | None:
    jobs = home / label / "jobs"
    found = [p for p in jobs.iterdir() if (p / "job.json").is_file()] if jobs.is_dir() else []
    return found[0] if found else None


def result(label: str, home: Path, rows: int, wall: float, process: subprocess.Popen) -> dict:
    _, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"{label} failed: {err[-2000:]}")
    job = job_folder(home, label)
    status = json.loads((job / "status.json").read_text())
    running = next(h["at"] for h in status["history"] if h["state"] == "running")
    run_s = (
        datetime.fromisoformat(status["finished_at"]) - datetime.fromisoformat(running)
    ).total_seconds()
    lines = (home / f"{label}.jsonl").read_text().splitlines()
    ids = [json.loads(line)["custom_id"] for line in lines]
    return {
        "run": label,
        "wall_s": round(wall, 1),
        "rows_per_s_wall": round(rows / wall, 2),
        "running_s": round(run_s, 1),
        "rows_per_s_running": round(rows / run_s, 2),
        "output_tokens": status["completion_tokens"],
        "exactly_once": len(ids) == len(set(ids)) == rows,
    }


def run(label: str, batch: Path, home: Path, extra: list[str], rows: int) -> dict:
    started = time.monotonic()
    process = start(label, batch, home, extra)
    process.wait()
    return result(label, home, rows, time.monotonic() - started, process)


def cluster_of(nodes: int):
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "resources": SLOT,
            "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 3},
        },
    )
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1, resources=SLOT)
    cluster.wait_for_nodes()
    return cluster


def ray_args(cluster, replicas: int) -> list[str]:
    resources = ["--replica-resources", json.dumps(SLOT)]
    return ["--ray", cluster.address, "--replicas", str(replicas), *resources]


def on_nodes(nodes: int, batch: Path, home: Path, rows: int) -> dict:
    cluster = cluster_of(nodes)
    try:
        return run(f"ray-{nodes}-nodes", batch, home, ray_args(cluster, nodes), rows)
    finally:
        cluster.shutdown()


def node_lost(batch: Path, home: Path, rows: int) -> dict:
    """Three nodes, two replicas (one node spare); a replica's node killed mid-job."""
    label = "ray-3-nodes-1-lost"
    cluster = cluster_of(3)
    cleanup: list[subprocess.Popen] = []
    try:
        started = time.monotonic()
        # Shards of two requests: the lost replica still holds shards when it is killed.
        process = start(label, batch, home, [*ray_args(cluster, 2), "--chunk-size", "2"])
        cleanup.append(process)
        victim, killed_at, shards_before = None, 0.0, 0
        while process.poll() is None:
            job = job_folder(home, label)
            stats = read_stats(job) if job else None  # none until the cluster answered
            stats = stats or {}
            working = [r for r in stats.get("replicas", []) if r.get("shards")]
            done = json.loads((job / "status.json").read_text())["done"] if job else 0
            if victim is None and len(working) == 2 and done <= rows // 2:
                head = cluster.head_node.node_id
                replica = next(r for r in working if r["node_id"] != head)
                victim, shards_before = replica, replica["shards"]
                node = next(n for n in cluster.worker_nodes if n.node_id == replica["node_id"])
                killed_at = time.time()
                cluster.remove_node(node, allow_graceful=False)
            time.sleep(0.2)
        wall = time.monotonic() - started
        out = result(label, home, rows, wall, process)
        stats = read_stats(job_folder(home, label))
        events = stats["events"]
        moved = next((e for e in events if "restarted on node" in e["event"]), None)
        lost = next((e for e in events if " lost " in e["event"]), None)
        replica = next(r for r in stats["replicas"] if r["replica_id"] == victim["replica_id"])
        out.update(
            seen_lost_s=_since(killed_at, lost),
            replica_restarted_s=_since(killed_at, moved),
            moved_replica_shards_after=replica.get("shards", 0) - shards_before,
            reruns=stats["reruns"],
            events=[e["event"] for e in events],
        )
        return out
    finally:
        for process in cleanup:
            if process.poll() is None:  # the bench failed: no run outlives it
                process.kill()
        cluster.shutdown()


def read_stats(job: Path) -> dict | None:
    from core.run.ray_stats import read_ray_stats

    return read_ray_stats(job)


def _since(killed_at: float, event: dict | None) -> float | None:
    if event is None:
        return None
    return round(datetime.fromisoformat(event["at"]).timestamp() - killed_at, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--node-loss-only", action="store_true", help="skip the scaling runs")
    args = parser.parse_args()
    os.environ["RAY_AUTH_MODE"] = "disabled"
    home = scratch_folder("ray-bench-")
    batch = home / "batch.jsonl"
    make_file(batch, args.rows, args.max_tokens)
    print(f"{args.rows} rows, max_tokens {args.max_tokens}, temperature 0", flush=True)
    if args.node_loss_only:
        print(json.dumps(node_lost(batch, home, args.rows)), flush=True)
        return
    local = run("local", batch, home, [], args.rows)
    show(local, local)
    for nodes in (1, 2, 3):
        show(on_nodes(nodes, batch, home, args.rows), local)
    show(node_lost(batch, home, args.rows), local)


def show(entry: dict, local: dict) -> None:
    """Prints a run as it ends (a later failure keeps the figures printed)."""
    entry["running_vs_local"] = round(entry["running_s"] / local["running_s"], 2)
    print(json.dumps(entry), flush=True)


if __name__ == "__main__":
    main()
