"""Benchmark: ``core check --no-tokens`` of a large file, reuse forecast included, with
deterministic lines (temperature 0: every line keyed) and without (temperature 1).

    .venv/bin/python bench/check_keys.py                         # this checkout, 300,000 lines
    .venv/bin/python bench/check_keys.py --against /tmp/wt-old   # and another checkout
    .venv/bin/python bench/check_keys.py --sensitive allow       # the scan off (default: warn)
    .venv/bin/python bench/check_keys.py --tokens                # tokens counted (the default)
    .venv/bin/python bench/check_keys.py --earlier-job           # a home where a job holds answers

Each run is a fresh ``python -m core check`` process in an empty home (no earlier jobs)
whose policy for sensitive data is ``--sensitive`` (warn, the studio's default, scans every
line's prompt; allow scans nothing; a checkout from before the scan ignores it), with
``--no-tokens`` unless ``--tokens`` (then prompt tokens are counted with the built-in
model's tokenizer, as ``core check`` does by default where that model is prepared; with
``--earlier-job`` the home holds one job's key file, so the forecast loads numpy and the
index as in a home where jobs ran, where without it it counts only the file's repeats);
checkouts take turns, file by file, so a noisy machine slows them alike. Each checkout's
``core`` is byte-compiled first: where ``PYTHONDONTWRITEBYTECODE`` is set, every run would
otherwise compile its modules again (and a checkout with more modules pay more). It prints
each run's wall time, the median per checkout and file, the ratio of each checkout's
median to this one's (above 1: slower than this checkout), and this one's time as a multiple
of each other's (the target: at most 1.00 against ``1cbd080``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.check_throughput import write_batch  # noqa: E402


def write_files(folder: Path, lines: int) -> dict[str, Path]:
    """The deterministic file, and the same lines sampled at temperature 1."""
    deterministic = folder / "deterministic.jsonl"
    write_batch(deterministic, lines)
    sampled = folder / "sampled.jsonl"
    with deterministic.open("rb") as source, sampled.open("wb") as out:
        for line in source:
            out.write(line.replace(b'"temperature":0', b'"temperature":1', 1))
    return {"temperature 0": deterministic, "temperature 1": sampled}


def check_seconds(
    checkout: Path, file: Path, home: Path, tokens: bool = False
) -> tuple[float, float]:
    """Wall seconds, and CPU seconds of the command and its helper processes."""
    env = {**os.environ, "BATCH_STUDIO_HOME": str(home), "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "core", "check", *([] if tokens else ["--no-tokens"]), str(file)],
        cwd=checkout,
        env=env,
        stdout=subprocess.DEVNULL,
        check=False,
    )
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return took, cpu


def cpu_model() -> str:
    """The CPU's model name as Linux gives it (the figures are this CPU's)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def commit_of(checkout: Path) -> str:
    """The checkout's commit, and whether its files differ from it."""
    git = ["git", "-C", str(checkout)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "core"], capture_output=True)
    return head.stdout.strip() + (" (core changed)" if dirty.stdout.strip() else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", action="append", default=[], help="another checkout")
    parser.add_argument(
        "--sensitive", choices=["allow", "warn"], default="warn", help="the home's scan policy"
    )
    parser.add_argument(
        "--earlier-job", action="store_true", help="a job in the home holds an answer"
    )
    parser.add_argument(
        "--tokens", action="store_true", help="count prompt tokens (core check's default)"
    )
    args = parser.parse_args()
    checkouts = [ROOT, *(Path(p).resolve() for p in args.against)]
    for checkout in checkouts:
        subprocess.run([sys.executable, "-m", "compileall", "-q", "core"], cwd=checkout, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        files = write_files(Path(tmp), args.lines)
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "sensitive.json").write_text(json.dumps({"policy": args.sensitive}))
        if args.earlier_job:  # one record of a job no one owns: nothing taken, all looked up
            (home / "jobs" / "earlier").mkdir(parents=True)
            (home / "jobs" / "earlier" / "reuse.v2.keys").write_bytes(bytes(44))
        print(f"a job in the home holds an answer: {args.earlier_job}")
        print(f"policy for sensitive data: {args.sensitive}; tokens counted: {args.tokens}")
        print(f"CPU: {cpu_model()}, {os.cpu_count()} cores")
        for checkout in checkouts:
            print(f"{checkout}: {commit_of(checkout)}")
        times = {(c, f): [] for c in checkouts for f in files}
        cpus = {(c, f): [] for c in checkouts for f in files}
        for run in range(args.runs):
            for name, file in files.items():
                for checkout in checkouts:
                    took, cpu = check_seconds(checkout, file, home, args.tokens)
                    times[checkout, name].append(took)
                    cpus[checkout, name].append(cpu)
                    print(f"run {run + 1} {name} {checkout}: {took:.2f} s, {cpu:.2f} CPU s")
        print(f"load average: {os.getloadavg()}")
        for name in files:
            ours = statistics.median(times[ROOT, name])
            our_cpu = statistics.median(cpus[ROOT, name])
            for checkout in checkouts:
                median = statistics.median(times[checkout, name])
                cpu = statistics.median(cpus[checkout, name])
                print(
                    f"{name}: {checkout}: median {median:.2f} s "
                    f"({args.lines / median:,.0f} lines/s), {cpu:.2f} CPU s; ratio to this "
                    f"checkout {median / ours:.2f} (CPU {cpu / our_cpu:.2f})"
                )
                if checkout != ROOT:  # the figure the target reads: at most 1.00
                    print(
                        f"{name}: this checkout takes {ours / median:.2f}x the wall time of "
                        f"{checkout.name} and {our_cpu / cpu:.2f}x its CPU"
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
