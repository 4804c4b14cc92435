"""Every page's rerun time with a million-request job: first render and a rerun, per page.

Usage::

    .venv/bin/python bench/pages.py [--finished 1000000] [--running 200000] [--keep DIR]

Builds, in a fresh data folder, a finished job of ``--finished`` requests (1% failed) and a
running one of ``--running`` requests, through the product's own writers (``create_job``,
``OutputWriter``, ``JobStatus``, ``append_samples``) and ingested as the app ingests, so the
files and tables are what a real run leaves; no engine runs. The finished job has saved
checks (``rules.yaml``, the Checks page's example rules), graded by the first page that
finds them ungraded, as after a new database. A stand-in worker process then
appends ~200 results a second to the running job, with its heartbeat, for the whole
benchmark. After a warm-up (a server's imports, and what its watchers read ahead of the
first visitor), each page is opened with ``AppTest`` in a fresh session, with the big job
selected: the time of its first render, and of a rerun (what every widget change costs
before the widget's own work; for Monitor what its 2 s refresh costs at most), and the
first render with the pages' caches of DuckDB results emptied and how long until its
figures are drawn (a page that computes them in the background first says "Computing…");
Monitor and Jobs also on the running job. Scripts are compiled once for all runs, as a
server does. Last, the peak RSS of this process (which is the UI process here) and one line
``slowest page: NAME N ms`` (of the renders).

The data folder is built once per size and kept (``--keep``, default under /tmp); building
a million requests takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# This file is called pages.py: the app's pages package must win over it.
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != REPO / "bench"]

from core.jobs.folder import JobFolder, create_job  # noqa: E402
from core.jobs.output_file import OutputWriter  # noqa: E402
from core.run.monitoring import append_samples, progress_sample  # noqa: E402
from core.run.outputs import Choice, Completion, error_line, success_line  # noqa: E402
from core.schemas import EngineConfig, JobStatus, now_iso  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
CHUNK = 20_000
FEED_PER_SECOND = 200
RESOURCES = {"rss_mib": 900.0, "cpu_percent": 190.0}  # what a worker's sampler adds
PAGES = [
    "upload.py",
    "build.py",
    "run.py",
    "monitor.py",
    "results.py",
    "review.py",
    "dashboards.py",
    "compare.py",
    "jobs.py",
    "settings.py",
]


def request(i: int) -> str:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Label the ticket: billing, bug or other."},
            {"role": "user", "content": f"Ticket {i}: the invoice for order {i * 7} is wrong."},
        ],
        "max_tokens": 16,
        "metadata": {"prompt_version": "v1", "source_id": str(i)},
    }
    line = {"custom_id": f"t-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
    return json.dumps(line)


def result(i: int) -> dict:
    if i % 100 == 99:
        return error_line(f"t-{i}", "engine_rejected", "prompt too long")
    answer = ("billing", "bug", "other")[i % 3]
    completion = Completion(31, [Choice(answer, "stop", 2)], latency_ms=40 + i % 90)
    return success_line(f"t-{i}", MODEL, completion)


def write_results(job: JobFolder, start: int, stop: int) -> tuple[int, int]:
    """Appends results ``start..stop`` as the worker does; returns (succeeded, failed)."""
    output, errors = OutputWriter(job.output), OutputWriter(job.errors)
    ok = failed = 0
    try:
        for first in range(start, stop, CHUNK):
            lines = [result(i) for i in range(first, min(first + CHUNK, stop))]
            good = [x for x in lines if x["error"] is None]
            output.write(good)
            errors.write([x for x in lines if x["error"] is not None])
            ok, failed = ok + len(good), failed + len(lines) - len(good)
    finally:
        output.close()
        errors.close()
    return ok, failed


def build_job(home: Path, name: str, requests: int, written: int, state: str) -> JobFolder:
    batch = home / f"{name}.jsonl"
    with batch.open("w") as out:
        for first in range(0, requests, CHUNK):
            out.write(
                "".join(request(i) + "\n" for i in range(first, min(first + CHUNK, requests)))
            )
    job = create_job(batch, home / "jobs", EngineConfig(model=f"/models/{MODEL}"))
    ok, failed = write_results(job, 0, written)
    status = JobStatus(total=requests, done=ok + failed, succeeded=ok, failed=failed)
    status.completion_tokens, status.prompt_tokens = 2 * ok, 31 * ok
    status.enter("running", "running")
    if state == "completed":
        status.enter("completed", "completed with errors")
        status.finished_at = now_iso()
    job.write_status(status)
    for k in range(600):  # ten minutes of heartbeats
        sample = progress_sample(k * written // 600, 2 * k * written // 600, RESOURCES)
        sample["t"] = time.time() - 600 + k
        append_samples(job.metrics, [sample])
    return job


def feed(job_dir: Path) -> None:
    """The stand-in worker: appends ~FEED_PER_SECOND results a second with a heartbeat."""
    job = JobFolder(job_dir)
    status = job.read_status()
    status.pid = os.getpid()
    i = status.done
    while i < status.total:
        started = time.monotonic()
        ok, failed = write_results(job, i, min(i + FEED_PER_SECOND // 4, status.total))
        i += ok + failed
        status.done, status.succeeded, status.failed = (
            i,
            status.succeeded + ok,
            status.failed + failed,
        )
        status.heartbeat_at = time.time()
        job.write_status(status)
        append_samples(job.metrics, [progress_sample(i, 2 * i, RESOURCES)])
        time.sleep(max(0.25 - (time.monotonic() - started), 0))


def build(home: Path, finished: int, running: int) -> None:
    marker = home / f"built-{finished}-{running}"
    if marker.exists():
        return
    from core.store.db import Store

    home.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    build_job(home, "finished", finished, finished, "completed")
    build_job(home, "running", running, running // 2, "running")
    print(f"built the jobs in {time.monotonic() - started:.0f} s", flush=True)
    started = time.monotonic()
    store = Store(home / "studio.duckdb")
    store.ingest_all(home / "jobs")
    store.close()
    print(f"ingested in {time.monotonic() - started:.0f} s", flush=True)
    marker.touch()


def timed(at, action) -> float:
    started = time.perf_counter()
    action()
    elapsed = (time.perf_counter() - started) * 1000
    if at.exception:
        raise SystemExit(f"the page failed: {[e.message for e in at.exception]}")
    return elapsed


def page_times(page: str, state: dict) -> tuple[float, float, float, float]:
    """First render with the pages' caches empty, the time until its figures are drawn
    (a page that computes them in the background says "Computing…" and redraws: the
    visitor's wait), first render in a fresh session, and the best of three reruns."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    times = []
    for clear in (True, False):
        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=600).run()
        for key, value in state.items():
            at.session_state[key] = value
        if clear:  # what the index gave the pages; the ledgers stay read
            from ui.page_cache import page_values

            st.cache_data.clear()
            page_values.clear()
        started = time.perf_counter()
        times.append(timed(at, lambda at=at: at.switch_page(f"pages/{page}").run()))
        if clear:
            while any("Computing" in c.value for c in at.caption):  # its fragment's redraw
                time.sleep(0.25)
                at.run()
            times.append((time.perf_counter() - started) * 1000)
    rerun = min(timed(at, at.run) for _ in range(3))
    return times[0], times[1], times[2], rerun


def server_script_cache() -> None:
    """A server compiles app.py and each page once (its Runtime holds one ScriptCache);
    AppTest makes a new cache on every run, so it compiles both again each time, a cost no
    visitor pays (tens of milliseconds a run): here every run shares one, as on a server."""
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache
    from streamlit.testing.v1 import app_test, local_script_runner

    shared = ScriptCache()
    app_test.ScriptCache = local_script_runner.ScriptCache = lambda: shared


def warm_up(state: dict, live: JobFolder) -> None:
    from core.jobs.ledger import summary

    for page in PAGES:
        page_times(page, state)
    summary(live, live.read_spec().shard_size)


def report(row: tuple[str, str, float, float, float, float]) -> None:
    page, job, cold, drawn, first, rerun = row
    print(
        f"{page:16} {job:9} cold {cold:7.0f} ms  drawn {drawn:7.0f} ms  "
        f"first {first:7.0f} ms  rerun {rerun:6.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--running", type=int, default=200_000)
    parser.add_argument("--keep", type=Path, default=Path("/tmp/batch-studio-bench-pages"))
    parser.add_argument("--feed", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.feed:
        feed(args.feed)
        return
    home = args.keep / f"{args.finished}-{args.running}"
    build(home, args.finished, args.running)
    os.environ["BATCH_STUDIO_HOME"] = str(home)
    jobs = {JobFolder(p).read_spec().source: JobFolder(p) for p in (home / "jobs").glob("job_*")}
    big = next(j for s, j in jobs.items() if s.endswith("finished.jsonl"))
    live = next(j for s, j in jobs.items() if s.endswith("running.jsonl"))
    if not (big.path / "rules.yaml").exists():  # checks in place (graded on first sight)
        from core.qa.rules import EXAMPLE

        (big.path / "rules.yaml").write_text(EXAMPLE, encoding="utf-8")
    server_script_cache()
    feeder = subprocess.Popen([sys.executable, __file__, "--feed", str(live.path)])
    rows = []
    try:
        time.sleep(2)  # the feeder is writing
        big_state = {"job_id": big.job_id, "batch_file": str(big.input)}
        # A server has its modules imported and its watchers' read-ahead done before the
        # first visitor's page; here one session opens every page first, untimed.
        started = time.monotonic()
        warm_up(big_state, live)
        print(f"warm-up (imports, first reads of both jobs): {time.monotonic() - started:.0f} s")
        for page in PAGES:
            rows.append((page, "finished", *page_times(page, big_state)))
            report(rows[-1])
        for page in ("monitor.py", "jobs.py"):
            rows.append((page, "running", *page_times(page, {"job_id": live.job_id})))
            report(rows[-1])
    finally:
        feeder.terminate()
        feeder.wait()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print()
    print(
        "| page | job | first render, caches empty (ms) | its figures drawn (ms) "
        "| first render (ms) | rerun (ms) |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for page, job, cold, drawn, first, rerun in rows:
        print(f"| {page} | {job} | {cold:,.0f} | {drawn:,.0f} | {first:,.0f} | {rerun:,.0f} |")
    print(f"\nUI process peak RSS: {rss:,.0f} MiB")
    renders = [(page, job, max(cold, first, rerun)) for page, job, cold, _, first, rerun in rows]
    page, job, slowest = max(renders, key=lambda r: r[2])  # renders, not a figure's wait
    print(f"slowest page: {page} ({job}) {slowest:.0f} ms")


if __name__ == "__main__":
    main()
