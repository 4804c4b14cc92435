"""Benchmark: the worker's memory for a job that floods the engine (issue 41 item 5).

    .venv/bin/python -m bench.flood                        # 100,000 and 1,000,000 lines
    .venv/bin/python -m bench.flood --lines 100000
    .venv/bin/python -m bench.flood --lines 1000000 --greedy  # temperature 0: reusable
    .venv/bin/python -m bench.flood --lines 1000000 --reused  # greedy, every answer made before

For each size, one generated job (chats, 40 documents' questions grouped by document,
temperature 1: nothing reused; ``--greedy``: temperature 0, each request keyed for reuse,
none answered before; ``--reused``: greedy, after an earlier job of the same lines that
answered every one, so the plan step writes every result from an earlier answer) and,
each in a fresh process, the path from the input to
the engine as the worker takes it, every request handed on as the engine would pull it
(no engine: the path alone):

- **all parsed** (the baseline, as the worker did before): every request parsed and
  held, then all put in engine order (``core.run.engine_order``);
- **windows** (the worker now): the worker's plan step itself (``JobRun.plan``: the
  requests column by column in a ``PlannedRequests``, their ``Left``, the reuse plan, each
  engine's ``Pending`` and the ETA's expectations in the ``StatusKeeper``), then the
  engine's ``Pending`` read as the engine asks, 8,192 parsed at a time, each request handed
  marked done as its result would be (``Left``) and counted as a written success by the
  ``StatusKeeper`` (its counts and the progress model) a window at a time, and the ETA's
  scan of the requests waiting (``LiveProgress.waiting``) at every window.

Prints each one's peak RSS above the process's RSS before it (the ledger read, the
modules imported), in MiB and bytes a line, its seconds, and windows/all parsed.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DOCUMENTS = 40
# A success's response as the status counts it (its usage), shared by every result line.
ANSWER = {"body": {"usage": {"prompt_tokens": 40, "completion_tokens": 16}}}


def write_batch(path: Path, lines: int, temperature: float = 1.0) -> None:
    per_document = max(lines // DOCUMENTS, 1)
    with path.open("w") as out:
        for i in range(lines):
            document = f"Document {i // per_document}. " + "A long shared text. " * 12
            content = f"{document}\nQuestion {i}: what does it say?"
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": content}],
                "max_tokens": 16,
                "temperature": temperature,
            }
            line = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}) + "\n")


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def measure(job_dir: str, way: str) -> None:
    """In a fresh process: one way's path, its peak RSS growth and seconds as JSON."""
    from core.check import scan
    from core.jobs.folder import JobFolder
    from core.jobs.ledger import read_ledger
    from core.run import worker
    from core.run.engine import EngineActivity
    from core.run.engine_order import engine_order
    from core.run.status_keeper import StatusKeeper
    from core.run.stopping import StopRequest

    job = JobFolder(Path(job_dir))
    spec = job.read_spec()
    ledger = read_ledger(job)
    before = rss_bytes()
    started = time.perf_counter()
    handed, scan_seconds = 0, 0.0
    if way == "all":
        requests = [c.request for c in scan(job.input, spec.defaults) if c.valid]
        for _ in engine_order(requests):
            handed += 1
    else:
        worker.read_ledger = lambda job: ledger  # read above, as the baseline holds it
        keeper = StatusKeeper(job)
        plan = worker.JobRun(job, keeper, StopRequest()).plan(False, None)
        handed = sum(reuse.reused_count for reuse in plan.reuse.values())  # written already
        requests = next(iter(plan.groups.values()), [])
        inside = EngineActivity(progress=((0, 16),) * 256)  # a full engine, as the ETA reads it
        written: list[dict] = []  # a window's results, counted as the writers count them
        for request in requests:
            plan.left.discard([request.custom_id])  # its result written and counted
            written.append({"custom_id": request.custom_id, "error": None, "response": ANSWER})
            handed += 1
            if handed % 8192 == 0:  # a heartbeat's forecast
                keeper.count(written)
                written.clear()
                scanned = time.perf_counter()
                keeper.progress.waiting(inside)
                scan_seconds = max(scan_seconds, time.perf_counter() - scanned)
        keeper.count(written)
        assert not plan.left and keeper.progress.outstanding == 0
        assert keeper.status.succeeded == handed
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    figures = {"handed": handed, "growth": peak - before, "seconds": seconds}
    print(json.dumps({**figures, "scan_ms": scan_seconds * 1000}))


def answer_all(job_dir: Path) -> None:
    """Writes an answer to every request of the job and indexes each under its key, as a
    run of it would: the earlier job a ``--reused`` job takes its answers from."""
    from core.jobs.folder import JobFolder
    from core.jobs.ledger import read_ledger
    from core.jobs.output_file import OutputWriter
    from core.reuse.index import KeyWriter, update_index
    from core.run import worker
    from core.run.outputs import Choice, Completion, success_line

    job = JobFolder(job_dir)
    planned, _ = worker._to_run(job, job.read_spec(), read_ledger(job), False, None, set())
    keys = KeyWriter(job)
    with OutputWriter(job.output) as output:
        for start in range(0, len(planned), 8192):
            rows = range(start, min(start + 8192, len(planned)))
            lines = [
                success_line(
                    planned.custom_id(row),
                    "m",
                    Completion(40, [Choice(f"answer {row}", "stop", 3)]),
                )
                for row in rows
            ]
            written = output.write(lines)
            keys.add((planned.key(row), *at) for row, at in zip(rows, written, strict=True))
    update_index(job_dir.parent)


def run_way(job_dir: Path, way: str) -> dict:
    command = [sys.executable, "-m", "bench.flood", "--measure", str(job_dir), way]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, action="append")
    parser.add_argument("--greedy", action="store_true", help="temperature 0: reusable")
    parser.add_argument("--reused", action="store_true", help="greedy, all answered before")
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        measure(*args.measure)
        return 0
    from core.jobs.folder import create_job
    from core.schemas import EngineConfig

    scratch = Path(tempfile.mkdtemp(prefix="bench-flood-"))
    try:
        for lines in args.lines or [100_000, 1_000_000]:
            batch = scratch / f"batch-{lines}.jsonl"
            write_batch(batch, lines, 0.0 if args.greedy or args.reused else 1.0)
            engine = EngineConfig(model="/models/none")
            if args.reused:
                answer_all(create_job(batch, scratch / "jobs", engine).path)
            job = create_job(batch, scratch / "jobs", engine)
            batch.unlink()
            figures = {way: run_way(job.path, way) for way in ("all", "windows")}
            for way, f in figures.items():
                assert f["handed"] == lines, f
                print(
                    f"{lines:>9,} lines  {way:<10} peak +{f['growth'] / 2**20:7.1f} MiB"
                    f" ({f['growth'] / lines:6.0f} B a line)  {f['seconds']:6.1f} s"
                    + (f"  ETA scan <= {f['scan_ms']:.1f} ms" if way == "windows" else "")
                )
            ratio = figures["windows"]["growth"] / figures["all"]["growth"]
            print(f"{lines:>9,} lines  windows/all parsed: {ratio:.2f} of the memory")
            shutil.rmtree(job.path.parent)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
