"""Another owner's queue: owner B's pages, queue scan and batch list, with and without
owner A's thousand queued jobs.

Usage::

    .venv/bin/python bench/owners.py [--queued 1000] [--keep DIR]

Builds two data folders through the product's writers (``create_job``, ``queue_job``,
``OutputWriter``, ``JobStatus``), no worker running: in both, owner B (an API key) has a
finished job of 2,000 requests and a queued one; in the second, owner A (another key) also
has ``--queued`` queued jobs of two lines each. Each folder is measured in a process of its
own, one after the other in the same run: B's pages (Jobs, Monitor, Run, Results; the pages
show every job, so B sees what they show) opened with ``AppTest`` in a fresh session with
B's finished job chosen, after a warm-up: the first render and the best of three reruns.
Then the worker's queue scan (``runnable_jobs``, what each admission looks at) and the
Batch API's list for B's key (``list_batches``, ``GET /v1/batches?limit=20``), best of
five. Last, a table of each figure with and without A's jobs and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != REPO / "bench"]

from bench.pages import server_script_cache, write_results  # noqa: E402
from core.jobs.folder import JobFolder, create_job, queue_job  # noqa: E402
from core.schemas import EngineConfig, JobStatus, now_iso  # noqa: E402

PAGES = ["jobs.py", "monitor.py", "run.py", "results.py"]
ENGINE = EngineConfig(model="/models/SmolLM2-135M-Instruct")
B_KEY, A_KEY = "key-b-0001", "key-a-0001"


def batch_file(home: Path, name: str, lines: int) -> Path:
    from bench.pages import request

    path = home / f"{name}.jsonl"
    path.write_text("".join(request(i) + "\n" for i in range(lines)))
    return path


def build(home: Path, queued: int) -> None:
    marker = home / f"built-{queued}"
    if marker.exists():
        return
    from core.store.db import Store

    home.mkdir(parents=True, exist_ok=True)
    jobs = home / "jobs"
    finished = create_job(batch_file(home, "b-finished", 2000), jobs, ENGINE, owner="b",
                          owner_key=B_KEY)  # fmt: skip
    ok, failed = write_results(finished, 0, 2000)
    status = JobStatus(total=2000, done=ok + failed, succeeded=ok, failed=failed)
    status.enter("running", "running")
    status.enter("completed", "completed with errors")
    status.finished_at = now_iso()
    finished.write_status(status)
    time.sleep(0.01)  # job ids order by time: B's queued job is the newer
    queue_job(create_job(batch_file(home, "b-queued", 20), jobs, ENGINE, owner="b",
                         owner_key=B_KEY))  # fmt: skip
    small = batch_file(home, "a-queued", 2)
    started = time.monotonic()
    for _ in range(queued):
        queue_job(create_job(small, jobs, ENGINE, owner="a", owner_key=A_KEY))
    print(f"{home.name}: made {queued} queued jobs in {time.monotonic() - started:.0f} s")
    store = Store(home / "studio.duckdb")
    store.ingest_all(jobs)
    store.close()
    marker.touch()


def best(action, times: int = 5) -> float:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        action()
        spent.append((time.perf_counter() - started) * 1000)
    return min(spent)


def page_times(page: str, state: dict) -> tuple[float, float]:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=600).run()
    for key, value in state.items():
        at.session_state[key] = value
    started = time.perf_counter()
    at.switch_page(f"pages/{page}").run()
    first = (time.perf_counter() - started) * 1000
    if at.exception:
        raise SystemExit(f"{page} failed: {[e.message for e in at.exception]}")
    return first, best(at.run, 3)


def measure(home: Path) -> dict[str, float]:
    """Every figure for one data folder (run in a process of its own)."""
    from core.api.batches import list_batches
    from core.api.keys import Caller
    from core.jobs.queue import runnable_jobs
    from core.schemas import JobSpec

    os.environ["BATCH_STUDIO_HOME"] = str(home)
    finished = next(
        JobFolder(p)
        for p in (home / "jobs").glob("job_*")
        if JobSpec.model_validate_json((p / "job.json").read_bytes()).source == "b-finished.jsonl"
    )
    server_script_cache()
    state = {"job_id": finished.job_id, "batch_file": str(finished.input)}
    for page in PAGES:  # warm-up: imports, the first reads
        page_times(page, state)
    figures = {}
    for page in PAGES:
        figures[f"{page} first render"], figures[f"{page} rerun"] = page_times(page, state)
    jobs = home / "jobs"
    figures["queue scan (runnable_jobs)"] = best(lambda: runnable_jobs(jobs, datetime.now(UTC)))
    caller = Caller(B_KEY, "b", 0)
    page = list_batches(home, caller, 20, None)
    assert len(page["data"]) == 2, page["data"]
    figures["GET /v1/batches (B's key)"] = best(lambda: list_batches(home, caller, 20, None))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--keep", type=Path, default=Path("/tmp/batch-studio-bench-owners"))
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    homes = {"without": args.keep / "without", "with": args.keep / f"with-{args.queued}"}
    build(homes["without"], 0)
    build(homes["with"], args.queued)
    results = {}
    for which, home in homes.items():
        out = subprocess.run(
            [sys.executable, __file__, "--measure", str(home)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        results[which] = json.loads(out.strip().splitlines()[-1])
    print(
        f"\n| what B waits for | without A's jobs (ms) | with A's {args.queued:,} queued (ms) "
        "| ratio |"
    )
    print("| --- | ---: | ---: | ---: |")
    for name, alone in results["without"].items():
        loaded = results["with"][name]
        print(f"| {name} | {alone:,.1f} | {loaded:,.1f} | {loaded / alone:.2f}x |")


if __name__ == "__main__":
    main()
