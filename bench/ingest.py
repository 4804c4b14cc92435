"""Ingest speed: result lines per second from a job folder into DuckDB.

Usage::

    .venv/bin/python bench/ingest.py [--lines 100000]

Builds a job folder with N requests, ingests it (the requests, once per job), then writes N
chained output lines (a tenth of them failures, in errors.jsonl) and times their ingest, as
the UI does while a job runs; a last ingest finds nothing new and must cost almost nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scratch import scratch_folder  # noqa: E402
from core.jobs.folder import create_job  # noqa: E402
from core.jobs.output_file import OutputWriter  # noqa: E402
from core.run.outputs import Choice, Completion, error_line, success_line  # noqa: E402
from core.schemas import EngineConfig, JobStatus  # noqa: E402
from core.store.db import Store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    args = parser.parse_args()
    work = scratch_folder("ingest-")
    batch = work / "batch.jsonl"
    with batch.open("w") as out:
        for i in range(args.lines):
            body = {
                "model": "m",
                "messages": [
                    {"role": "system", "content": "Summarise the ticket in one sentence."},
                    {"role": "user", "content": f"Ticket {i}: the export is broken again. " * 3},
                ],
                "max_tokens": 48,
                "metadata": {"task": "summary", "source_id": str(i), "prompt_version": "v2"},
            }
            line = {"custom_id": f"id-{i}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}) + "\n")
    job = create_job(batch, work / "jobs", EngineConfig(model="/models/bench"))
    store = Store(work / "studio.duckdb")
    started = time.perf_counter()
    store.ingest(job)
    requests_seconds = time.perf_counter() - started
    answer = Completion(
        60, [Choice("The customer reports that the export fails. " * 2, "stop", 24)]
    )
    with OutputWriter(job.output) as output, OutputWriter(job.errors) as errors:
        for start in range(0, args.lines, 1000):
            ids = range(start, min(start + 1000, args.lines))
            output.write(success_line(f"id-{i}", "m", answer) for i in ids if i % 10)
            errors.write(
                error_line(f"id-{i}", "engine_rejected", "too long") for i in ids if not i % 10
            )
    job.write_status(JobStatus(state="completed", total=args.lines, done=args.lines))

    started = time.perf_counter()
    rows = store.ingest(job)
    results_seconds = time.perf_counter() - started
    started = time.perf_counter()
    again = store.ingest(job)
    idle = time.perf_counter() - started
    print(f"{args.lines} requests: {requests_seconds:.2f} s "
          f"= {args.lines / requests_seconds:,.0f} request lines/s (once per job)")  # fmt: skip
    print(f"{rows} result lines: {results_seconds:.2f} s "
          f"= {rows / results_seconds:,.0f} result lines/s")  # fmt: skip
    print(f"an ingest with nothing new: {idle * 1000:.0f} ms, {again} rows")


if __name__ == "__main__":
    main()
