"""A job on the real engine whose run window closes while it runs: it pauses, then resumes
by itself when the window opens, with one result per request.

Usage::

    .venv/bin/python bench/windows.py [--requests 300] [--max-tokens 48]

Runs ``python -m core run`` (the built-in chat model, 8 requests inside the engine at once)
in a scratch home with a window closed for one minute: from the first minute boundary at
least 20 s after the start to the next one (``daily HH:MM-HH:MM``, in the studio's time
zone, open the rest of the day). It watches the job's status and prints when it paused and
with how many results, whether the requests inside the engine at the close finished (none
aborted: the paused job's results are those it had plus those), when it resumed, and the
output file: lines, distinct custom_ids, errors, and ``core verify``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scratch import scratch_folder  # noqa: E402
from core.jobs.folder import list_jobs  # noqa: E402
from core.jobs.ledger import reconcile, verify  # noqa: E402
from core.jobs.windows import read_settings  # noqa: E402

LEAD_SECONDS = 20  # the least time the job runs before its window closes


def make_batch(path: Path, count: int, max_tokens: int) -> None:
    with path.open("w") as out:
        for i in range(count):
            body = {
                "model": "bench",
                "messages": [
                    {"role": "user", "content": f"Tell a short story about the number {i}."}
                ],
                "max_tokens": max_tokens,
                "min_tokens": max_tokens,
                "temperature": 0,
            }
            line = {"custom_id": f"w{i:04d}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}) + "\n")


def closed_minute(zone: str) -> tuple[datetime, str]:
    """The minute the window is closed (its start) and the windows' text."""
    now = datetime.now(ZoneInfo(zone))
    close = (now + timedelta(seconds=LEAD_SECONDS + 60)).replace(second=0, microsecond=0)
    reopen = close + timedelta(minutes=1)
    return close, f"daily {reopen:%H:%M}-{close:%H:%M}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()

    home = scratch_folder("windows-home-")
    env = {**os.environ, "BATCH_STUDIO_HOME": str(home)}
    work = scratch_folder("windows-")
    batch, out = work / "batch.jsonl", work / "out.jsonl"
    make_batch(batch, args.requests, args.max_tokens)
    zone = read_settings(home).time_zone
    close, windows = closed_minute(zone)
    print(f"{args.requests} chats of {args.max_tokens} tokens; windows {windows!r} ({zone})")
    command = [sys.executable, "-m", "core", "run", str(batch), "-o", str(out),
               "--chunk-size", "8", "--windows", windows]  # fmt: skip
    started = time.time()
    cli = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    paused = resumed = None
    while cli.poll() is None:
        jobs = list_jobs(home / "jobs")
        status = jobs[0].read_status() if jobs else None
        if status is not None and status.paused_at and paused is None:
            paused = (time.time(), status.done, status.total)
            print(f"paused {paused[0] - close.timestamp():+.1f} s from the close, "
                  f"{status.done} of {status.total} done: {status.message}")  # fmt: skip
        if paused and resumed is None and status is not None and status.state == "running":
            resumed = time.time()
            print(f"resumed {resumed - (close.timestamp() + 60):+.1f} s from the window's opening")
        time.sleep(0.5)
    elapsed = time.time() - started
    job = list_jobs(home / "jobs")[0]
    final = job.read_status()
    report = reconcile(job)
    lines = out.read_text().splitlines() if out.exists() else []
    ids = {json.loads(line)["custom_id"] for line in lines}
    print(f"\nended {final.state} after {elapsed:.0f} s; runs: {final.runs}")
    print(f"paused: {'yes' if paused else 'NO'}; resumed by itself: {'yes' if resumed else 'NO'}")
    print(f"output file: {len(lines)} lines, {len(ids)} distinct custom_ids")
    print(f"lost (no result): {len(report.missing)}; duplicated: {len(report.duplicates)}; "
          f"failed: {report.failed}; verify: {verify(job).ok}")  # fmt: skip
    if cli.returncode not in (0, 4):
        print(cli.stderr.read() if cli.stderr else "", file=sys.stderr)


if __name__ == "__main__":
    main()
