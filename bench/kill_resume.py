"""A job killed at random points, resumed each time: what is lost, doubled and repeated.

Usage::

    .venv/bin/python bench/kill_resume.py [--requests 2000] [--kills 3] [--seed 1]

Runs ``python -m core run`` on a generated file, kills the worker with SIGKILL at random
progress points, runs the same command again after each kill (which continues the job),
and prints: requests lost (no result), results duplicated (two success lines for one
request), and work repeated (requests that were inside the engine at a kill and so ran
twice; read from the worker's status, which is at most one heartbeat old).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scratch import scratch_folder  # noqa: E402
from core.jobs.folder import list_jobs  # noqa: E402
from core.jobs.ledger import reconcile, verify  # noqa: E402


def make_batch(path: Path, count: int) -> None:
    rng = random.Random(0)
    words = ["invoice", "refund", "login", "export", "delivery", "plan", "API", "mobile"]
    with path.open("w") as out:
        for i in range(count):
            body = {
                "model": "bench",
                "messages": [{"role": "user", "content": f"One word for: {rng.choice(words)}"}],
                "max_tokens": 4,
                "temperature": 0,
            }
            line = {"custom_id": f"k{i:05d}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    home = scratch_folder("kill-home-")
    env = {**os.environ, "BATCH_STUDIO_HOME": str(home)}
    work = scratch_folder("kill-")
    batch, out = work / "batch.jsonl", work / "out.jsonl"
    make_batch(batch, args.requests)
    command = [sys.executable, "-m", "core", "run", str(batch), "-o", str(out)]
    rng = random.Random(args.seed)
    targets = sorted(rng.sample(range(args.requests // 10, args.requests * 9 // 10), args.kills))
    repeated = 0
    started = time.perf_counter()
    for kill, target in enumerate(targets, start=1):
        cli = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
        while True:
            jobs = list_jobs(home / "jobs")
            status = jobs[0].read_status() if jobs else None
            if status and status.state == "running" and status.done >= target and status.pid:
                break
            time.sleep(0.2)
        os.kill(status.pid, signal.SIGKILL)
        cli.wait()
        status = jobs[0].read_status()
        repeated += status.in_flight
        print(f"kill {kill}: at {status.done} results, {status.in_flight} in the engine")
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    elapsed = time.perf_counter() - started
    job = list_jobs(home / "jobs")[0]
    report = reconcile(job)
    print(f"\n{args.requests} requests, {args.kills} kills, {elapsed:.0f} s in all")
    print(f"lost (no result): {len(report.missing)}")
    print(f"duplicated results: {len(report.duplicates)}")
    print(f"work repeated (requests in the engine at a kill): {repeated}")
    print(f"succeeded: {report.succeeded}, failed: {report.failed}, verify: {verify(job).ok}")
    lines = out.read_text().splitlines()
    print(
        f"output file: {len(lines)} lines, {len({json.loads(x)['custom_id'] for x in lines})} ids"
    )


if __name__ == "__main__":
    main()
