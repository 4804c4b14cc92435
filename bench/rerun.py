"""Benchmark: reruns cost only what changed (docs/reuse.md).

    .venv/bin/python bench/rerun.py [--lines 2000] [--max-tokens 16]
        [--parts edit,repeat,prefix,lookup] [--documents 40] [--questions 25]
        [--lookup-keys 1000000] [--lookup-jobs 100]

Every studio job runs on a warm engine (the resident worker, loaded by a warm-up job
first); vLLM's ``run_batch`` runs as a user would run it, a process of its own. Times are
the job's own (created to finished, from its status) and the ``core run`` process's.

- ``edit``: a deterministic file (temperature 0) run, then the same file with 1 % of its
  lines edited: the second job's time against the first's and against ``run_batch`` on the
  edited file, and whether every unchanged answer is the first job's.
- ``repeat``: a file whose lines repeat others 30 % of the time, run with reuse and with
  ``--no-reuse``: the tokens the engine generated against lines x tokens, and the times.
- ``prefix``: documents x questions, shuffled, at temperature 0: the studio (its engine
  order) against the studio in file order (the same job run by a worker that leaves the
  order as the file has it: ``bench/file_order.py``, warmed first) and ``run_batch``, run
  between two ``run_batch`` runs; the share of prompt tokens the engine found in its prefix
  cache; answers compared with the second ``run_batch`` run (the engine's own
  nondeterminism). The documents must outgrow the engine's KV cache (1 GiB on CPU, about
  23,000 tokens of SmolLM2 in float32) for the order to matter: each is about 720 tokens.
- ``lookup``: 1,000,000 answers (``--lookup-keys``) in 100 jobs' key files
  (``--lookup-jobs``), indexed; a new job's 10,000 keys (``--lookup-asked``), half of them
  answered before, looked up cold (page cache dropped where this process may) in the index
  and, as before it, in every job's file: the time and the peak memory
  :func:`core.reuse.index.find_earlier` adds to a start, each twice, interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import cpu_model  # noqa: E402
from bench.scratch import scratch_folder  # noqa: E402
from core.config import default_model_dir  # noqa: E402
from core.devices import gpu_count  # noqa: E402
from core.jobs.engine_files import IDLE_ENV  # noqa: E402
from core.run.engine import configure_cpu_environment, resolve_dtype  # noqa: E402


def write(path: Path, rows: list[tuple[str, list[dict], int]]) -> Path:
    with path.open("w") as out:
        for cid, messages, max_tokens in rows:
            body = {"model": "bench", "messages": messages, "max_tokens": max_tokens,
                    "temperature": 0}  # fmt: skip
            line = {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}) + "\n")
    return path


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def studio(batch: Path, out: Path, *options: str, file_order: bool = False) -> dict:
    """Runs ``core run``; returns its job's status and the process's and the job's time."""
    # In file order: the job's worker leaves the engine order out (bench/file_order.py).
    head = ["-m", "bench.file_order"] if file_order else ["-m", "core"]
    command = [sys.executable, *head, "run", str(batch), "-o", str(out), "--restart", *options]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    process = time.perf_counter() - started
    if result.returncode not in (0, 4):
        raise SystemExit(f"core run failed:\n{result.stderr[-3000:]}")
    job_id = next(w for w in result.stdout.split() if w.startswith("job_"))
    home = Path(os.environ["BATCH_STUDIO_HOME"])
    status = json.loads((home / "jobs" / job_id / "status.json").read_text())
    created = json.loads((home / "jobs" / job_id / "job.json").read_text())["created_at"]
    job = _at(status["finished_at"]) - _at(created)
    return {"process": process, "job": job, "status": status}


def _at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def run_batch(batch: Path, out: Path) -> float:
    dtype = resolve_dtype("auto", on_gpu=False)
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.run_batch", "-i", str(batch),
        "-o", str(out), "--model", str(default_model_dir()), "--dtype", dtype,
        "--served-model-name", "bench", "--seed", "0", "--enforce-eager",
    ]  # fmt: skip
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"run_batch failed:\n{result.stderr[-3000:]}")
    return time.perf_counter() - started


def answers(out: Path) -> dict[str, str]:
    found = {}
    for raw in out.read_text().splitlines():
        line = json.loads(raw)
        body = (line.get("response") or {}).get("body")
        if body:
            found[line["custom_id"]] = body["choices"][0]["message"]["content"]
    return found


def edit_part(work: Path, lines: int, max_tokens: int) -> None:
    rows = [(f"e{i}", ask(f"Summarise ticket {i}: the order {9000 + i} is late."), max_tokens)
            for i in range(lines)]  # fmt: skip
    first = studio(write(work / "first.jsonl", rows), work / "first.out")
    edited_ids = {f"e{i}" for i in range(0, lines, 100)}
    rows = [(c, ask(m[0]["content"] + " Edited.") if c in edited_ids else m, t) for c, m, t in rows]
    edited = work / "edited.jsonl"
    second = studio(write(edited, rows), work / "edited.out")
    peer = run_batch(edited, work / "edited.run_batch.out")
    before, after = answers(work / "first.out"), answers(work / "edited.out")
    same = sum(after[c] == before[c] for c in before if c not in edited_ids)
    print(f"edit: {lines} lines, {len(edited_ids)} edited")
    print(f"  first job {first['job']:.1f} s (process {first['process']:.1f} s)")
    print(f"  edited job {second['job']:.1f} s (process {second['process']:.1f} s), "
          f"{second['status']['run_done']} lines on the engine, "
          f"{second['status']['reused']} reused")  # fmt: skip
    print(
        f"  edited/first: {second['job'] / first['job']:.1%} of the job's time "
        f"({second['process'] / first['process']:.1%} of the process's); goal <= 5 %"
    )
    print(
        f"  run_batch on the edited file {peer:.1f} s: {peer / second['job']:.1f}x the job's "
        f"time ({peer / second['process']:.1f}x the process's); goal >= 20x"
    )
    print(f"  unchanged answers identical to the first job's: {same}/{lines - len(edited_ids)}")


def repeat_part(work: Path, lines: int, max_tokens: int) -> None:
    rng = random.Random(1)
    rows: list[tuple[str, list[dict], int]] = []
    for i in range(lines):
        if rows and rng.random() < 0.3:
            _, messages, limit = rng.choice(rows)
            rows.append((f"r{i}", messages, limit))
        else:
            rows.append((f"r{i}", ask(f"Name a use for item {i} of {lines}."), max_tokens))
    batch = write(work / "repeats.jsonl", rows)
    load = os.getloadavg()[0]
    distinct = len({json.dumps(m) for _, m, _ in rows})
    reused = studio(batch, work / "repeats.out")
    plain = studio(batch, work / "repeats.plain.out", "--no-reuse")
    engine, total = (reused["status"]["run_completion_tokens"],
                     reused["status"]["completion_tokens"])  # fmt: skip
    print(f"repeat: {lines} lines, {distinct} distinct")
    print(
        f"  engine generated {engine:,} tokens for {total:,} in the answers: "
        f"{total / max(engine, 1):.2f}x fewer; goal >= 1.3x"
    )
    print(
        f"  time with reuse {reused['job']:.1f} s, without {plain['job']:.1f} s: "
        f"{plain['job'] / reused['job']:.2f}x"
    )
    print(f"  load average (1 min) {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")


def prefix_part(work: Path, documents: int, questions: int) -> None:
    rng = random.Random(2)
    words = ["order", "refund", "parcel", "invoice", "account", "password", "export", "plan"]
    docs = [
        f"Case file {d}. " + " ".join(rng.choice(words) for _ in range(700))
        for d in range(documents)
    ]
    rows = [(f"d{d}q{q}", ask(f"{docs[d]}\n\nQuestion {q}: which word comes first?"), 8)
            for d in range(documents) for q in range(questions)]  # fmt: skip
    rng.shuffle(rows)
    batch = write(work / "prefix.jsonl", rows)
    load = os.getloadavg()[0]
    # Interleaved so a shared machine's drift falls on both sides: run_batch, the studio in
    # engine order, in file order, run_batch again.
    peer = run_batch(batch, work / "prefix.run_batch.out")
    # Warmed again: a run_batch can outlast the resident worker's idle time, and a job's
    # time (created to finished) would then hold the model's load.
    studio(write(work / "warm.jsonl", [("w", ask("Hello."), 4)]), work / "warm.out")
    ordered = studio(batch, work / "prefix.out", "--no-reuse")
    # The resident worker runs jobs in engine order: a worker of bench/file_order.py, warmed
    # first, runs this one, and is stopped after it.
    stop_engine()
    studio(write(work / "warm.file.jsonl", [("w", ask("Hello."), 4)]), work / "warm.file.out",
           file_order=True)  # fmt: skip
    in_file_order = studio(batch, work / "prefix.file.out", "--no-reuse", file_order=True)
    stop_engine()
    peer_again = run_batch(batch, work / "prefix.run_batch2.out")
    a, b = answers(work / "prefix.run_batch.out"), answers(work / "prefix.run_batch2.out")
    ours = answers(work / "prefix.out")
    print(f"prefix: {documents} documents x {questions} questions, shuffled")
    print(
        f"  studio (engine order) {ordered['job']:.1f} s, {cached(work / 'prefix.out')}; "
        f"in file order {in_file_order['job']:.1f} s, {cached(work / 'prefix.file.out')}: "
        f"{in_file_order['job'] / ordered['job']:.2f}x; goal >= 1.5x"
    )
    mean = (peer + peer_again) / 2
    print(
        f"  run_batch {peer:.1f} s and {peer_again:.1f} s (load included): "
        f"{mean / ordered['job']:.2f}x the studio's job time (their mean); goal >= 1.5x"
    )
    print(
        f"  answers differing between two run_batch runs: {sum(a[c] != b[c] for c in a)}; "
        f"studio against run_batch: {sum(ours[c] != a[c] for c in a)} of {len(a)}"
    )
    print(f"  load average (1 min) {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")


def cached(out: Path) -> str:
    """The share of an output's prompt tokens the engine found in its prefix cache."""
    prompt = hits = 0
    for raw in out.read_text().splitlines():
        usage = ((json.loads(raw).get("response") or {}).get("body") or {}).get("usage") or {}
        prompt += usage.get("prompt_tokens", 0)
        hits += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return f"{hits / max(prompt, 1):.0%} of {prompt:,} prompt tokens cached"


def lookup_part(work: Path, keys: int = 1_000_000, jobs: int = 100, asked: int = 10_000) -> None:
    import numpy as np

    from core.reuse.index import _COLUMNS, KEY_FILE, find_earlier, local_owner, update_index

    jobs_dir = work / "lookup-jobs"
    rng = np.random.default_rng(3)
    per_job = keys // jobs
    wanted: list[bytes] = []
    for j in range(jobs):
        folder = jobs_dir / f"job_{j:05d}"
        folder.mkdir(parents=True)
        # Only an owner's jobs are searched (core.reuse.index.reuse_owner): all this user's.
        provenance = {"owner": local_owner()[len("user:") :], "owner_key": None}
        (folder / "job.json").write_text(json.dumps({"provenance": provenance}))
        records = np.zeros(per_job, _COLUMNS)
        records["high"], records["low"] = rng.integers(0, 2**63, (2, per_job), np.uint64)
        records["offset"], records["length"] = np.arange(per_job) * 100, 100
        (folder / KEY_FILE).write_bytes(records.tobytes())
        if j == 0 or j == jobs - 1:  # a new job's keys: half answered before, half new
            chosen = records[rng.choice(per_job, min(per_job, asked // 4), replace=False)]
            wanted += [r.tobytes()[:16] for r in chosen]
    while len(wanted) < asked:
        wanted += [rng.bytes(16) for _ in range(asked - len(wanted))]
    started = time.perf_counter()
    update_index(jobs_dir)  # as the worker does when each job ends, at once here
    built = time.perf_counter() - started
    print(
        f"lookup: {keys:,} answers in {jobs:,} jobs; the index built from their files in "
        f"{built:.1f} s; a new job asks {len(wanted):,} keys"
    )
    for name, indexed in (
        ("every job's file (before)", False),
        ("the index", True),
        ("every job's file (before)", False),
        ("the index", True),
    ):
        os.sync()
        try:
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            cold = "cold (page cache dropped)"
        except OSError:
            cold = "warm page cache (could not drop it)"
        try:
            Path("/proc/self/clear_refs").write_text("5\n")  # the peak (VmHWM) reset to VmRSS
            before = _memory("VmRSS")
        except OSError:
            before = 0
        started, cpu = time.perf_counter(), time.process_time()
        found = find_earlier(jobs_dir, wanted, skip="", owner=local_owner(), indexed=indexed).found
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        grown = f"{(_memory('VmHWM') - before) / 2**20:,.0f} MiB" if before else "not measured"
        print(
            f"  {name}: {found:,} found in {seconds:.2f} s ({cpu:.2f} s of CPU: the figure a "
            f"loaded machine moves least), {cold}; peak memory {grown} above the process's"
        )
    print("  goal 1 s at 1,000,000 answers, 5 s at 10,000,000")


def _memory(field: str) -> int:
    """This process's ``VmRSS`` (resident memory) or ``VmHWM`` (its peak) in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--parts", default="edit,repeat,prefix,lookup")
    parser.add_argument("--documents", type=int, default=40)
    parser.add_argument("--questions", type=int, default=25)
    parser.add_argument("--lookup-keys", type=int, default=1_000_000)
    parser.add_argument("--lookup-jobs", type=int, default=100)
    parser.add_argument("--lookup-asked", type=int, default=10_000)
    args = parser.parse_args()
    parts = args.parts.split(",")
    os.environ.setdefault("BATCH_STUDIO_HOME", str(scratch_folder("bench-home-")))
    # The resident worker keeps the model between the jobs, and through a run_batch of
    # the prefix part (18 minutes for 360 requests on a loaded 2-core EPYC).
    os.environ[IDLE_ENV] = "3600"
    if not gpu_count():
        configure_cpu_environment(1.0)  # run_batch's KV cache (vLLM's own sizing fails here)
    work = scratch_folder("bench-rerun-")
    print(f"CPU: {cpu_model()}", flush=True)
    try:
        if set(parts) - {"lookup"}:
            studio(write(work / "warm.jsonl", [("w", ask("Hello."), 4)]), work / "warm.out")
        if "edit" in parts:
            edit_part(work, args.lines, args.max_tokens)
        if "repeat" in parts:
            repeat_part(work, args.lines // 2, args.max_tokens)
        if "prefix" in parts:
            prefix_part(work, args.documents, args.questions)
        if "lookup" in parts:
            lookup_part(work, args.lookup_keys, args.lookup_jobs, args.lookup_asked)
    finally:
        stop_engine()


def stop_engine() -> None:
    """Stops the worker that holds the engine (the next job starts a worker of its own)."""
    subprocess.run([sys.executable, "-m", "core", "engine", "stop"], cwd=REPO,
                   capture_output=True)  # fmt: skip


if __name__ == "__main__":
    main()
