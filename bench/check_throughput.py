"""Benchmark: how fast ``check`` reads a large batch file, and how much memory it holds.

    .venv/bin/python bench/check_throughput.py                 # 1,000,000 lines (~0.5 GB)
    .venv/bin/python bench/check_throughput.py --lines 200000  # a quicker run
    .venv/bin/python bench/check_throughput.py --file my.jsonl --model DIR
    .venv/bin/python bench/check_throughput.py --scan --lines 300000  # sensitive-data scan on/off

It writes a realistic batch file (several tasks with their system prompts, ticket-like
user texts, metadata, some multi-turn lines, some lines without max_tokens) unless given
one, then runs each check in a fresh process and prints lines/s and the peak RSS of that
process (and of each helper process): the structural check alone, then the check with
prompt-token counting on the model folder (default: the built-in model). Each runs twice:
in one process (the baseline) and as ``check`` runs by default (a large file is split over
the cores), and the speed-up of the second over the first is printed. Targets on a
2-core machine: structure >= 100,000 lines/s with peak RSS < 500 MB; token counting
>= 30,000 lines/s.

Figures are wall-clock; the CPU seconds beside them show what the processes used (on a
busy machine wall time grows, CPU time much less).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASKS = {
    "ticket-summary": "You summarise customer support tickets for an operations team. "
    "Answer in one sentence.",
    "review-sentiment": "Classify the sentiment of the product review as exactly one word: "
    "positive, negative or neutral.",
    "invoice-extract": "Extract the invoice number, date, total and currency as JSON.",
}
WORDS = [
    "the",
    "my",
    "our",
    "a",
    "an",
    "this",
    "that",
    "order",
    "refund",
    "invoice",
    "account",
    "password",
    "login",
    "charged",
    "twice",
    "payment",
    "failed",
    "shipping",
    "delayed",
    "damaged",
    "parcel",
    "replacement",
    "subscription",
    "cancel",
    "upgrade",
    "plan",
    "billing",
    "error",
    "page",
    "dashboard",
    "export",
    "csv",
    "report",
    "api",
    "webhook",
    "latency",
    "timeout",
    "please",
    "help",
    "since",
    "yesterday",
    "customer",
    "cannot",
    "open",
    "broken",
    "slow",
    "again",
    "still",
    "waiting",
    "week",
    "days",
    "support",
    "team",
    "email",
    "phone",
    "chat",
    "Okta",
    "SSO",
    "users",
    "admin",
    "settings",
    "mobile",
    "app",
    "iOS",
    "Android",
    "version",
    "update",
    "crash",
    "screen",
    "button",
    "click",
    "nothing",
    "happens",
]


def _text(rng: random.Random, words: int) -> str:
    parts = [rng.choice(WORDS) for _ in range(words)]
    parts[rng.randrange(words)] = f"#{rng.randrange(10_000, 99_999)}"
    parts[rng.randrange(words)] = f"${rng.randrange(5, 500)}.{rng.randrange(100):02d}"
    return " ".join(parts).capitalize() + "."


def write_batch(path: Path, lines: int, seed: int = 7, planted_every: int = 0) -> None:
    """Writes ``lines`` realistic chat request lines (about 500 bytes each); with
    ``planted_every`` N, every Nth user text also holds an e-mail address, a phone number
    and a date (what the sensitive-data scan finds, and digits it must look at and pass)."""
    import msgspec

    rng = random.Random(seed)
    encode = msgspec.json.encode
    tasks = list(TASKS.items())
    with path.open("wb", buffering=1 << 20) as out:
        for i in range(lines):
            task, system = tasks[i % len(tasks)]
            messages = [
                {"role": "system", "content": system},
                {"role": "user", "content": _text(rng, rng.randint(15, 40))},
            ]
            if planted_every and i % planted_every == 0:
                messages[1]["content"] += (
                    f" Reach me at user{i}@example.com or (415) 555-01{i % 100:02d};"
                    f" ordered on 2024-05-{i % 28 + 1:02d}."
                )
            if i % 20 == 0:  # a follow-up conversation
                messages += [
                    {"role": "assistant", "content": _text(rng, 10)},
                    {"role": "user", "content": _text(rng, 8)},
                ]
            body = {
                "model": "gpt-4o-mini",
                "messages": messages,
                "temperature": 0,
                "metadata": {"task": task, "source_id": f"S-{i}", "prompt_version": "v3"},
            }
            if i % 10:
                body["max_tokens"] = 64
            line = {
                "custom_id": f"{task}:S-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": body,
            }
            out.write(encode(line) + b"\n")


def run_phase(
    path: Path, model: str | None, processes: int | None, sensitive: str = "warn"
) -> dict:
    """One check in this process; returns its figures (run in a fresh process)."""
    from core.check import check_file

    if model:
        from core.check.tokens import load_counter

        load_counter(model)  # loading the tokenizer is not part of the throughput
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    report = check_file(path, model_folder=model, processes=processes, sensitive=sensitive)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    helpers = resource.getrusage(resource.RUSAGE_CHILDREN)  # the helper processes, if any
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    cpu += helpers.ru_utime + helpers.ru_stime
    peak_mb = after.ru_maxrss / 1024
    return {
        "lines": report.lines,
        "valid": report.valid,
        "seconds": round(seconds, 2),
        "lines_per_s": round(report.lines / seconds),
        "mb_per_s": round(path.stat().st_size / seconds / 1e6, 1),
        "cpu_seconds": round(cpu, 2),
        "lines_per_cpu_s": round(report.lines / cpu) if cpu else 0,
        "peak_rss_mb": round(peak_mb),
        "helper_peak_rss_mb": round(helpers.ru_maxrss / 1024),
        "prompt_tokens": report.prompt_tokens,
        "sensitive_lines": report.sensitive.flagged_lines if report.sensitive else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--file", help="check this file instead of generating one")
    parser.add_argument("--model", help="model folder for token counting (default: built-in)")
    parser.add_argument("--skip-tokens", action="store_true", help="structural check only")
    parser.add_argument("--phase", choices=["structure", "tokens"], help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sensitive", default="warn", help=argparse.SUPPRESS)
    parser.add_argument(
        "--scan",
        action="store_true",
        help="only the sensitive-data scan on and off (allow against warn), in one process, "
        "on a file with an e-mail and a phone in every 10th line, runs interleaved",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, with --scan")
    args = parser.parse_args()

    if args.phase:
        model = args.model if args.phase == "tokens" else None
        figures = run_phase(Path(args.file), model, args.processes, args.sensitive)
        print(json.dumps(figures))
        return 0
    if args.scan:
        return scan_on_off(args)

    from core.config import data_paths, default_model_dir

    if args.file:
        path = Path(args.file)
    else:
        path = data_paths().home / "bench" / f"batch_{args.lines}.jsonl"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            write_batch(path, args.lines)
            print(f"wrote {path} in {time.perf_counter() - started:.1f} s")
    print(f"{path}: {path.stat().st_size / 1e6:.0f} MB")
    model = args.model or str(default_model_dir())
    phases = ["structure"] if args.skip_tokens else ["structure", "tokens"]
    for phase in phases:
        seconds = {}
        for label, processes in (("1 process", ["--processes", "1"]), ("default", [])):
            command = [sys.executable, __file__, "--phase", phase, "--file", str(path)]
            command += ["--model", model, *processes]
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode:
                print(f"{phase}: failed\n{result.stderr}")
                return 1
            f = json.loads(result.stdout)
            seconds[label] = f["seconds"]
            print(
                f"{phase:9} {label:9}: {f['lines']:,} lines in {f['seconds']} s = "
                f"{f['lines_per_s']:,} lines/s ({f['mb_per_s']} MB/s; {f['cpu_seconds']} CPU s), "
                f"peak RSS {f['peak_rss_mb']} MB"
                + (f" + {f['helper_peak_rss_mb']} MB per helper" if processes == [] else "")
                + (f", {f['prompt_tokens']:,} prompt tokens" if phase == "tokens" else "")
            )
        print(
            f"{phase:9} speed-up of the default over 1 process: "
            f"{seconds['1 process'] / seconds['default']:.2f}x"
        )
    return 0


def scan_on_off(args: argparse.Namespace) -> int:
    """The check with the sensitive-data scan off (allow) and on (warn), each run in a fresh
    process of its own, interleaved; CPU seconds are the steadier figure on a shared
    machine. With tokens counted too unless --skip-tokens."""
    from statistics import median

    from core.config import data_paths, default_model_dir

    path = Path(args.file) if args.file else None
    if path is None:
        path = data_paths().home / "bench" / f"batch_{args.lines}_planted.jsonl"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_batch(path, args.lines, planted_every=10)
    model = args.model or str(default_model_dir())
    phases = ["structure"] if args.skip_tokens else ["structure", "tokens"]
    for phase in phases:
        cpu: dict[str, list[float]] = {"allow": [], "warn": []}
        for _ in range(args.repeats):
            for policy in cpu:
                command = [sys.executable, __file__, "--phase", phase, "--file", str(path)]
                command += ["--model", model, "--processes", "1", "--sensitive", policy]
                result = subprocess.run(command, capture_output=True, text=True, check=False)
                if result.returncode:
                    print(f"{phase} {policy}: failed\n{result.stderr}")
                    return 1
                f = json.loads(result.stdout)
                cpu[policy].append(f["cpu_seconds"])
                found = f["sensitive_lines"]
                print(
                    f"{phase:9} scan {'on ' if policy == 'warn' else 'off'}: {f['lines']:,} "
                    f"lines, {f['cpu_seconds']} CPU s = {f['lines_per_cpu_s']:,} lines/CPU s"
                    + (f", {found:,} lines with sensitive data" if found is not None else "")
                )
        off, on = round(median(cpu["allow"]), 2), round(median(cpu["warn"]), 2)
        lines = f["lines"]
        print(
            f"{phase:9} medians: off {off} CPU s ({lines / off:,.0f} lines/CPU s), on {on} "
            f"CPU s ({lines / on:,.0f} lines/CPU s), on/off {on / off:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
