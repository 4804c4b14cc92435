"""What a ``GET /metrics`` scrape costs with many finished jobs (issue 41 item 4).

Usage::

    .venv/bin/python bench/metrics_scrape.py [--jobs 100] [--lines 200] [--scrapes 20]

Makes ``--jobs`` finished jobs of ``--lines`` requests each in a scratch data folder (the
real worker writes them, answered by a script: tests/support/jobs.py), then scrapes
``/metrics`` through the API's routes in this process as a loopback client: the first
scrape (it reads each job's result lines once) and the median of the next ``--scrapes``
(each a few ``stat`` calls per job, the status files parsed again only when changed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scratch import scratch_folder  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args()
    home = scratch_folder("metrics-scrape-") / "home"
    os.environ["BATCH_STUDIO_HOME"] = str(home)
    os.environ["BATCH_STUDIO_REUSE"] = "0"

    from tests.support.jobs import finished_job
    from tests.support.metrics import loopback

    started = time.perf_counter()
    for j in range(args.jobs):
        rows = {f"r{i}": (None if i % 10 == 0 else f"answer {i}") for i in range(args.lines)}
        finished_job(home, rows, {f"r{i}": 100 + i for i in range(args.lines)}, name=f"b{j}.jsonl")
    print(f"made {args.jobs} finished jobs of {args.lines} lines in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    with loopback() as client:
        started = time.perf_counter()
        reply = client.get("/metrics")
        first = time.perf_counter() - started
        assert reply.status_code == 200, reply.text
        times = []
        for _ in range(args.scrapes):
            started = time.perf_counter()
            client.get("/metrics")
            times.append(time.perf_counter() - started)
    print(f"first scrape (every result line read once): {first * 1000:.0f} ms, "
          f"{len(reply.content):,} bytes")  # fmt: skip
    print(f"later scrapes: median {statistics.median(times) * 1000:.1f} ms, "
          f"max {max(times) * 1000:.1f} ms over {args.scrapes}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
