"""Benchmark: jobs side by side on one engine (issue 41's figures).

    .venv/bin/python bench/share.py                      # 2,000 and 10 lines, 1,000 + 1,000
    .venv/bin/python bench/share.py --lines 600 --rounds 2 --parts small

Every job goes through ``submit()`` (the door the Run page and the Batch API use) to one
resident worker holding the built-in chat model (loaded once, before anything is timed),
in a scratch data folder with reuse off (each run asks the engine, never an earlier
answer). Chats of ``--max-tokens`` tokens at temperature 0, prompts new in every run.
Each round measures, in this order:

- **alone**: one job of ``--lines`` lines, submit to completion;
- **beside a small one**: the same size, owner ``alice``; once a tenth of it is done, a
  10-line job of owner ``bob``: the small job's time from its creation to its first
  result and to its completion, and the big job's total against *alone* (goal: the small
  one within 10 s, the big one at most 10 % longer);
- **two halves**: two jobs of ``--lines / 2`` lines, owners ``alice`` and ``bob``,
  submitted together: throughput of the two against *alone* (goal: at least 0.95x) and
  how far apart they finish (goal: within 10 % of each other's time);
- **scraped**: *alone* again while a child process scrapes ``GET /metrics`` through the
  API's routes once a second: its time against *alone* (goal: no measurable slowdown:
  compare with the spread of the rounds' *alone* runs).

``--parts`` picks which run beside *alone* (all three by default). Figures are medians
over ``--rounds``; the machine's load average is printed at start
and end, as these machines are shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scratch import scratch_folder  # noqa: E402

SCRAPER = """
import time
from tests.support.metrics import loopback
with loopback() as client:
    assert client.get("/metrics").status_code == 200
    print("ready", flush=True)  # imported and scraped once: from here on, one a second
    while True:
        time.sleep(1.0)
        assert client.get("/metrics").status_code == 200
"""


def chat_batch(
    path: Path, n: int, tag: str, max_tokens: int, models: tuple[str, ...] = ("m",)
) -> Path:
    """``n`` chats, line ``i`` naming ``models[i]`` (the last one past the list's end); the
    prompts depend on ``tag`` and ``i`` only, so two files of one tag ask the same
    questions."""
    rows = (
        {
            "custom_id": f"{tag}-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": models[min(i, len(models) - 1)],
                "messages": [{"role": "user", "content": f"Summarise ticket {tag} number {i}."}],
                "max_tokens": max_tokens,
                "temperature": 0,
            },
        }
        for i in range(n)
    )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


class Runner:
    """Submits jobs to the scratch home's resident worker and waits for them."""

    def __init__(self, home: Path, max_tokens: int) -> None:
        self.home, self.max_tokens, self.count = home, max_tokens, 0

    def submit(self, n: int, owner: str):  # type: ignore[no-untyped-def]
        from core.config import default_model_dir
        from core.jobs.submit import Submission, submit
        from core.schemas import EngineConfig

        self.count += 1
        tag = f"{owner}{self.count}"
        batch = chat_batch(self.home / f"{tag}.jsonl", n, tag, self.max_tokens)
        settings = Submission(engine=EngineConfig(model=str(default_model_dir())), owner=owner,
                              reuse=False)  # fmt: skip
        return submit(batch, settings).job

    @staticmethod
    def wait(job, until=lambda s: s.is_final, timeout: float = 3600.0):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = job.read_status()
            if until(status):
                return status
            if status.is_final:
                raise AssertionError(f"{job.path.name} ended {status.state}: {status.error}")
            time.sleep(0.05)
        raise AssertionError(f"{job.path.name} not done within {timeout:.0f} s")

    def alone(self, n: int) -> float:
        started = time.monotonic()
        job = self.submit(n, "alice")
        status = self.wait(job)
        assert status.state == "completed" and status.succeeded == n, status
        return time.monotonic() - started

    def beside_small(self, n: int) -> tuple[float, float, float]:
        """The small job's first result and completion after its creation, and the big
        job's time."""
        started = time.monotonic()
        big = self.submit(n, "alice")
        self.wait(big, lambda s: s.state == "running" and s.done >= n // 10)
        created = time.monotonic()
        small = self.submit(10, "bob")
        self.wait(small, lambda s: s.done > 0 or s.is_final)
        first = time.monotonic() - created
        small_status = self.wait(small)
        small_time = time.monotonic() - created
        assert small_status.state == "completed" and small_status.succeeded == 10
        big_status = self.wait(big)
        assert big_status.state == "completed" and big_status.pid == small_status.pid
        assert big_status.succeeded == n  # each request once, those taken out included
        return first, small_time, time.monotonic() - started

    def halves(self, n: int) -> tuple[float, float]:
        """Both jobs' times from their submit to each one's completion."""
        started = time.monotonic()
        jobs = [self.submit(n // 2, owner) for owner in ("alice", "bob")]
        ended: dict[int, float] = {}
        while len(ended) < 2:
            for i, job in enumerate(jobs):
                if i not in ended and job.read_status().is_final:
                    ended[i] = time.monotonic() - started
            time.sleep(0.05)
        for job in jobs:
            assert job.read_status().state == "completed"
        return ended[0], ended[1]

    def scraped(self, n: int) -> float:
        scraper = subprocess.Popen([sys.executable, "-c", SCRAPER], cwd=ROOT,
                                   stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            # Its imports and first scrape done before the job: a scrape a second is timed.
            assert scraper.stdout is not None and scraper.stdout.readline().strip() == "ready"
            return self.alone(n)
        finally:
            scraper.kill()
            scraper.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2000, help="the big job's lines")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--parts", default="small,halves,scrape",
                        help="beside the alone run: small, halves, scrape")  # fmt: skip
    args = parser.parse_args()
    parts = set(args.parts.split(","))

    home = scratch_folder("bench-share-")
    os.environ["BATCH_STUDIO_HOME"] = str(home)
    os.environ["BATCH_STUDIO_ENGINE_IDLE"] = "3600"
    os.environ["BATCH_STUDIO_REUSE"] = "0"
    from core.model_folders import prepare_default_model

    prepare_default_model()
    runner = Runner(home, args.max_tokens)
    print(f"CPU: {os.cpu_count()} logical cores; load average {os.getloadavg()[0]:.1f} at start")
    runner.alone(8)  # the model loads here, untimed
    n = args.lines
    alone: list[float] = []
    first: list[float] = []
    small: list[float] = []
    beside: list[float] = []
    halves: list[tuple[float, float]] = []
    scraped: list[float] = []
    for r in range(args.rounds):
        alone.append(runner.alone(n))
        line = f"round {r + 1}: alone {alone[-1]:.1f} s"
        if "small" in parts:
            first_time, small_time, big_time = runner.beside_small(n)
            first.append(first_time)
            small.append(small_time)
            beside.append(big_time)
            line += (f"; beside a 10-line job {big_time:.1f} s, the small one's first result "
                     f"{first_time:.1f} s, its last {small_time:.1f} s")  # fmt: skip
        if "halves" in parts:
            halves.append(runner.halves(n))
            line += f"; two halves {halves[-1][0]:.1f} and {halves[-1][1]:.1f} s"
        if "scrape" in parts:
            scraped.append(runner.scraped(n))
            line += f"; scraped {scraped[-1]:.1f} s"
        print(line, flush=True)

    med = statistics.median
    base = med(alone)
    print(f"\n{n} lines of {args.max_tokens} tokens, {args.rounds} round(s), medians:")
    print(f"  alone: {base:.1f} s (rounds {', '.join(f'{t:.1f}' for t in alone)})")
    if small:
        print(f"  a 10-line job of another owner beside it: first result {med(first):.1f} s, "
              f"done {med(small):.1f} s after its creation "
              f"(goal 10 s: {'met' if med(small) <= 10 else 'not met'})")  # fmt: skip
        slower = med(beside) / base - 1
        print(f"  the big job beside it: {med(beside):.1f} s, {slower:+.1%} against alone "
              f"(goal at most +10 %: {'met' if slower <= 0.10 else 'not met'})")  # fmt: skip
    if halves:
        both = [max(pair) for pair in halves]
        apart = [abs(a - b) / max(a, b) for a, b in halves]
        ratio = base / med(both)
        together = "met" if ratio >= 0.95 else "not met"
        even = "met" if med(apart) <= 0.10 else "not met"
        print(f"  two jobs of {n // 2}: both done in {med(both):.1f} s, {ratio:.2f}x the "
              f"throughput of one of {n} (goal 0.95x: {together}); they finish "
              f"{med(apart):.1%} apart (goal 10 %: {even})")  # fmt: skip
    if scraped:
        scraped_change = med(scraped) / base - 1
        spread = (max(alone) - min(alone)) / base if len(alone) > 1 else float("nan")
        print(f"  alone while /metrics is scraped once a second: {med(scraped):.1f} s, "
              f"{scraped_change:+.1%} (the alone runs' own spread: {spread:.1%})")  # fmt: skip
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    subprocess.run([sys.executable, "-m", "core", "engine", "stop"], cwd=ROOT,
                   capture_output=True, check=False)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
