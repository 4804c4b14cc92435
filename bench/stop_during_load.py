"""SIGTERM to the real worker while a model loads beside a running job (issue 41 item 2).

    .venv/bin/python bench/stop_during_load.py [--lines 400]

A chat job runs on the built-in model in a resident worker; an embeddings job then joins
it, so the worker loads the embedding model beside the running one. While that job says
``loading``, the worker gets SIGTERM (what ``systemctl stop`` or a container's stop
sends). Prints how long the worker took to exit, which of its processes outlived it,
each job's state and message (``--lines`` must keep the chat job running through the
other's load: 400 do on two cores), and, after ``core resume`` of each job, whether every line
has exactly one result. Exits 1 where any of that is wrong: the stop is a check on the
real engine that ``tests/unit/test_side_by_side.py`` makes on stand-in loads.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scratch import scratch_folder  # noqa: E402

HOME = scratch_folder("stop-load-home-")
os.environ["BATCH_STUDIO_HOME"] = str(HOME)  # before core reads it

import psutil  # noqa: E402

from core.config import default_embedding_model_dir, default_model_dir  # noqa: E402
from core.jobs.folder import JobFolder, create_job, start_worker  # noqa: E402
from core.jobs.ledger import reconcile, verify  # noqa: E402
from core.schemas import EngineConfig, JobState  # noqa: E402


def write_batch(path: Path, lines: int, embeddings: bool) -> Path:
    with path.open("w") as out:
        for i in range(lines):
            if embeddings:
                url, body = "/v1/embeddings", {"model": "e", "input": f"Ticket {i}: it fails."}
            else:
                url = "/v1/chat/completions"
                content = f"Write a line about river {i}."
                body = {"model": "m", "messages": [{"role": "user", "content": content}],
                        "max_tokens": 32, "min_tokens": 32, "temperature": 0}  # fmt: skip
            out.write(json.dumps({"custom_id": f"x{i}", "method": "POST", "url": url,
                                  "body": body}) + "\n")  # fmt: skip
    return path


def wait(what: str, condition, seconds: float = 600):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.05)
    sys.exit(f"gave up waiting for {what}")


def job_on(folder: Path, name: str, model: Path, lines: int, embeddings: bool) -> JobFolder:
    batch = write_batch(folder / f"{name}.jsonl", lines, embeddings)
    job = create_job(batch, HOME / "jobs", EngineConfig(model=str(model)))
    start_worker(job)
    return job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=400)
    args = parser.parse_args()
    work = scratch_folder("stop-load-")
    os.environ["BATCH_STUDIO_ENGINE_IDLE"] = "300"  # the worker stays for the second job

    chat = job_on(work, "chat", default_model_dir(), args.lines, embeddings=False)
    wait("the chat job's first results", lambda: chat.read_status().done > 0)
    worker = psutil.Process(chat.read_status().pid)
    vectors = job_on(work, "vectors", default_embedding_model_dir(), args.lines, True)
    wait("the embedding model's load", lambda: vectors.read_status().state == JobState.LOADING)
    time.sleep(1.0)  # inside the load, not at its first line
    processes = worker.children(recursive=True)
    sent = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=300)
    took = time.monotonic() - sent
    _, alive = psutil.wait_procs(processes, timeout=10)
    print(f"SIGTERM during the embedding model's load: the worker exited in {took:.1f} s; "
          f"{len(processes)} child processes, {len(alive)} alive 10 s later")  # fmt: skip
    bad = bool(alive)
    for job in (chat, vectors):
        status = job.read_status()
        print(f"  {Path(job.read_spec().source).name}: {status.state}, "
              f"{status.done} of {args.lines} done: {status.message}")  # fmt: skip
        bad |= status.state != JobState.CANCELLED or status.interrupted

    for job in (chat, vectors):
        resumed = subprocess.run([sys.executable, "-m", "core", "resume", job.job_id],
                                 cwd=REPO, capture_output=True, text=True)  # fmt: skip
        report = reconcile(job)
        whole = not report.missing and verify(job).ok and job.read_status().succeeded == args.lines
        print(f"  core resume {job.job_id}: exit {resumed.returncode}; every line one result: "
              f"{whole}")  # fmt: skip
        bad |= not whole
    subprocess.run([sys.executable, "-m", "core", "engine", "stop"], cwd=REPO,
                   capture_output=True)  # fmt: skip
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
