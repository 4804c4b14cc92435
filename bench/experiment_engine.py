"""Benchmark: an experiment's engine time against the same lines run as one plain job
(issue 43: within 5 %).

    .venv/bin/python bench/experiment_engine.py [--items 100] [--variants 4] [--runs 2]
        [--max-tokens 16]

In a scratch data folder, with reuse off (``BATCH_STUDIO_REUSE=0`` and ``--no-reuse``:
neither job takes the other's answers) and one resident worker holding the built-in model
(``core.config.default_model_dir()``, loaded by an untimed run of the experiment first, so
the first timed job finds the engine as the later ones do):

- **experiment**: a promptfoo configuration of ``--items`` tests x ``--variants`` prompts
  (one provider, temperature 0, ``--max-tokens``) run by ``core experiment run``;
- **plain**: the experiment job's own input file (``input.jsonl``, what its engine ran),
  copied byte for byte, run by ``core run`` as one plain job.

Runs interleaved, ``A B B A ...`` over ``--runs`` rounds so a shared machine's drift falls
on both. Each job's time is its own, from its status (``job_seconds``: the worker's
running time; created to finished beside it), not the CLI process's, with the share of
its prompt tokens the engine found in its prefix cache (equal shares: neither job gained
from running after the other). Prints each job, the
medians' ratio experiment / plain against the goal (<= 1.05), the CPU, the commit and the
load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import cpu_model  # noqa: E402
from bench.scratch import scratch_folder  # noqa: E402

GOAL = 1.05


def config(items: int, variants: int, max_tokens: int) -> str:
    """A promptfoo configuration: ``variants`` prompts worded differently, one provider,
    ``items`` tests with their own variables (so no two lines ask the same), one check."""
    out = "description: tickets\nprompts:\n"
    for i in range(variants):
        out += (f"  - id: p{i}\n    label: prompt {i}\n    raw: 'Variant {i}. Summarise "
                "ticket {{n}}: the order {{order}} is late.'\n")  # fmt: skip
    out += "providers:\n  - id: openai:chat:gpt-4o-mini\n    label: mini\n"
    out += f"    config: {{temperature: 0, max_tokens: {max_tokens}}}\n"
    out += "defaultTest:\n  assert:\n    - {type: icontains, value: order}\n"
    out += "tests:\n"
    for t in range(items):
        out += f"  - description: ticket {t}\n    vars: {{n: {t}, order: {9000 + t}}}\n"
    return out


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "core", *args], cwd=REPO,
                            capture_output=True, text=True)  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"core {' '.join(args)} failed ({result.returncode}):\n"
                         f"{result.stderr[-3000:]}")  # fmt: skip
    return result


def job_times(home: Path, job_id: str) -> dict[str, Any]:
    """A finished job's own times and counts, from its folder."""
    folder = home / "jobs" / job_id
    status = json.loads((folder / "status.json").read_text())
    job = json.loads((folder / "job.json").read_text())
    if status["state"] != "completed" or status["reused"]:
        raise SystemExit(f"{job_id}: {status['state']}, {status['reused']} reused: {status}")
    span = _at(status["finished_at"]) - _at(job["created_at"])
    prompt = hits = 0
    for raw in (folder / "output.jsonl").read_text().splitlines():
        usage = json.loads(raw)["response"]["body"].get("usage") or {}
        prompt += usage.get("prompt_tokens", 0)
        hits += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    cached = f"{hits / max(prompt, 1):.0%} of {prompt:,} prompt tokens cached"
    return {"id": job_id, "seconds": status["job_seconds"], "span": span, "pid": status["pid"],
            "load": status.get("model_load_seconds") or 0.0, "lines": status["run_done"],
            "tokens": status["run_completion_tokens"], "reuse": job.get("reuse"),
            "cached": cached}  # fmt: skip


def _at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def experiment(home: Path, source: Path) -> dict[str, Any]:
    experiment_id = cli("experiment", "run", str(source)).stdout.split()[0]
    state = json.loads((home / "experiments" / experiment_id / "state.json").read_text())
    return job_times(home, state["job_id"])


def plain(home: Path, batch: Path, out: Path) -> dict[str, Any]:
    printed = cli("run", str(batch), "-o", str(out), "--restart", "--no-reuse").stdout
    return job_times(home, next(w for w in printed.split() if w.startswith("job_")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100, help="the experiment's tests")
    parser.add_argument("--variants", type=int, default=4, help="its prompts")
    parser.add_argument("--runs", type=int, default=2, help="rounds of A B (then B A, ...)")
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()

    home = scratch_folder("bench-experiment-engine-")
    os.environ["BATCH_STUDIO_HOME"] = str(home)
    os.environ["BATCH_STUDIO_ENGINE_IDLE"] = "3600"  # core.jobs.engine_files.IDLE_ENV
    os.environ["BATCH_STUDIO_REUSE"] = "0"  # the experiment's job too (it has no flag)
    from core.config import default_model_dir
    from core.model_folders import prepare_default_model

    prepare_default_model()
    work = home / "bench"
    work.mkdir()
    source = work / "promptfooconfig.yaml"
    source.write_text(config(args.items, args.variants, args.max_tokens), encoding="utf-8")
    lines = args.items * args.variants
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    start_load = os.getloadavg()
    print(f"CPU: {cpu_model()}; commit {commit}; model {default_model_dir().name}")
    print(
        f"{args.items} tests x {args.variants} prompts = {lines} lines, "
        f"{args.max_tokens} tokens, temperature 0, reuse off; {args.runs} round(s)"
    )
    print(f"load average {_load(start_load)} at the start", flush=True)
    try:
        # Untimed, first: the model loads and the engine has run these very lines (its
        # prefix cache too, where a prompt fills a block), so the first timed job is not
        # the only one to meet them afresh; its input file is the plain job's file.
        worker = experiment(home, source)
        print(f"warm-up experiment {worker['id']}: {worker['span']:.1f} s (model load "
              f"{worker['load']:.1f} s), worker pid {worker['pid']}", flush=True)  # fmt: skip
        batch = work / "plain.jsonl"
        first_input = (home / "jobs" / worker["id"] / "input.jsonl").read_bytes()
        batch.write_bytes(first_input)
        times: dict[str, list[float]] = {"experiment": [], "plain": []}
        spans: dict[str, list[float]] = {"experiment": [], "plain": []}
        for r in range(args.runs):
            for kind in ("experiment", "plain") if r % 2 == 0 else ("plain", "experiment"):
                if kind == "experiment":
                    job = experiment(home, source)
                else:
                    job = plain(home, batch, work / f"plain{r}.out")
                ran = (home / "jobs" / job["id"] / "input.jsonl").read_bytes()
                same = "input identical" if ran == first_input else "INPUT DIFFERS"
                warm_note = "" if job["pid"] == worker["pid"] else ", ANOTHER WORKER"
                print(f"round {r + 1} {kind:10} {job['id']}: {job['seconds']:.2f} s "
                      f"(created to finished {job['span']:.2f} s), {job['lines']} lines on "
                      f"the engine, {job['tokens']} tokens, {job['cached']}, model load "
                      f"{job['load']:.1f} s, reuse {job['reuse']}, {same}{warm_note}; load "
                      f"{os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
                times[kind].append(job["seconds"])
                spans[kind].append(job["span"])
    finally:
        subprocess.run([sys.executable, "-m", "core", "engine", "stop"], cwd=REPO,
                       capture_output=True)  # fmt: skip
    med = statistics.median
    ratio = med(times["experiment"]) / med(times["plain"])
    span_ratio = med(spans["experiment"]) / med(spans["plain"])
    print(f"medians: experiment {med(times['experiment']):.2f} s, plain "
          f"{med(times['plain']):.2f} s: experiment / plain {ratio:.3f} (goal <= {GOAL}: "
          f"{'met' if ratio <= GOAL else 'not met'}); created to finished "
          f"{span_ratio:.3f}")  # fmt: skip
    print(f"load average {_load(start_load)} at the start, {_load(os.getloadavg())} at the end")
    return 0


def _load(load: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


if __name__ == "__main__":
    sys.exit(main())
