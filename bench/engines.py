"""Benchmark: one engine's throughput with its engine core in-process against in a child
process (vLLM V1 multiprocessing), the cost of holding several engines in one worker.

    .venv/bin/python bench/engines.py [--requests 100] [--repeats 3] [--max-tokens 48]

Each run is a fresh process that loads the built-in chat model through ``core.run.engine``
(the product's engine path) with ``VLLM_ENABLE_V1_MULTIPROCESSING`` 0 (``inproc``) or 1
(``mp``), then streams the same 100-line chat job through ``Engine.stream`` as a job does;
only the stream is timed (the load is printed apart). Runs alternate A/B/A/B so a loaded
machine's drift hits both alike. Prints output tokens/s per run, the medians and the ratio
mp/inproc (above 1: the child process is faster), and whether the answers are identical.
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MODES = {"inproc": "0", "mp": "1"}


def one_run(batch: Path, out: Path) -> None:
    """In this (fresh) process: load, stream the batch, write figures and answers to ``out``."""
    from core.check.requests import parse_body
    from core.config import default_model_dir
    from core.run.engine import Engine
    from core.schemas import EngineConfig, JobDefaults

    rows = [json.loads(line) for line in batch.read_text().splitlines()]
    requests = [parse_body(r["custom_id"], r["body"], JobDefaults()) for r in rows]
    engine = Engine(EngineConfig(model=str(default_model_dir())))
    started = time.perf_counter()
    results = [r for chunk in engine.stream(requests, window=engine.max_num_seqs) for r in chunk]
    seconds = time.perf_counter() - started
    answers = {req.custom_id: res.choices[0].text for req, res in results}
    tokens = sum(c.completion_tokens for _, res in results for c in res.choices)
    out.write_text(
        json.dumps(
            {"seconds": seconds, "tokens": tokens, "load": engine.load_seconds, "answers": answers}
        )
    )
    engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--one", nargs=2, metavar=("BATCH", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one_run(Path(args.one[0]), Path(args.one[1]))
        return 0

    from bench.scratch import scratch_folder
    from bench.throughput import make_batch
    from core.model_folders import prepare_default_model

    prepare_default_model()
    work = scratch_folder("bench-engines-")
    batch = work / "batch.jsonl"
    make_batch(batch, args.requests, args.max_tokens, shared_system=True)
    print(f"CPU: {os.cpu_count()} logical cores; load average {os.getloadavg()[0]:.1f} at start")
    print(f"{args.requests} chats, max_tokens <= {args.max_tokens}, built-in chat model")
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    answers: dict[str, dict[str, str]] = {}
    for repeat in range(args.repeats):
        for mode, flag in MODES.items():  # A/B/A/B
            out = work / f"{mode}-{repeat}.json"
            env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": flag}
            command = [sys.executable, __file__, "--one", str(batch), str(out)]
            done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
            figures = json.loads(out.read_text())
            rate = figures["tokens"] / figures["seconds"]
            rates[mode].append(rate)
            answers[mode] = figures["answers"]
            print(
                f"  repeat {repeat + 1} {mode:6s} {figures['tokens']:5d} tokens in "
                f"{figures['seconds']:6.1f} s = {rate:6.1f} tokens/s (load {figures['load']:.1f} s,"
                f" load average {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    medians = {m: statistics.median(r) for m, r in rates.items()}
    for mode, rate in medians.items():
        spread = max(rates[mode]) - min(rates[mode])
        print(f"{mode:6s} median {rate:6.1f} tokens/s (spread {spread:.1f})")
    pairs = [b / a for a, b in zip(rates["inproc"], rates["mp"], strict=True)]
    print(
        f"throughput ratio mp/inproc: {medians['mp'] / medians['inproc']:.3f} of the medians; "
        f"per A/B pair {', '.join(f'{p:.3f}' for p in pairs)}"
    )
    same = sum(answers["mp"].get(k) == v for k, v in answers["inproc"].items())
    print(f"answers identical: {same}/{len(answers['inproc'])}")
    print(f"load average at end {os.getloadavg()[0]:.1f} (shared machine: figures under load)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
