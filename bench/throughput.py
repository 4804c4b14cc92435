"""Throughput of three paths over the same batch file, each path a whole process.

1. ``direct``: ``vllm.LLM.chat`` (``LLM.embed`` for embeddings) on all requests at once
   (the engine's ceiling here);
2. ``run_batch``: vLLM's own ``python -m vllm.entrypoints.openai.run_batch`` (the peer);
3. ``studio``: Batch Studio's ``python -m core run`` (worker, ledger and all).

Usage::

    .venv/bin/python bench/throughput.py [--requests 96] [--repeats 2] [--max-tokens 48]
        [--model DIR] [--no-shared-system]
    .venv/bin/python bench/throughput.py --workload embeddings [--requests 4000]

Prints requests/s and output tokens/s per path (median and spread over the repeats), the
ratios studio/direct and studio/run_batch, and whether every path's answers equal the
direct path's at temperature 0 (for embeddings: the least cosine between each path's
vectors and the direct path's). On a GPU the same script runs unchanged (pass --model).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scratch import scratch_folder  # noqa: E402
from core.config import default_embedding_model_dir, default_model_dir  # noqa: E402
from core.devices import gpu_count  # noqa: E402
from core.run.engine import configure_cpu_environment, resolve_dtype  # noqa: E402

SYSTEM = (
    "You are a support analyst. Summarise the customer's ticket in one short sentence "
    "for the operations team, naming the product area and the customer's request."
)
TOPICS = [
    "I was charged twice for my subscription this month and need a refund.",
    "The CSV export has been broken since Tuesday; the file is empty.",
    "Password reset emails never arrive, I checked the spam folder.",
    "Our API calls return 429 errors although we are under the limit.",
    "The mobile app crashes when I open the invoices tab on Android 14.",
    "My parcel has been stuck in transit for nine days with no update.",
    "We need to add three more seats to our team plan before Friday.",
    "The dashboard shows yesterday's numbers, not today's.",
]


def make_batch(path: Path, count: int, max_tokens: int, shared_system: bool) -> None:
    rng = random.Random(0)
    with path.open("w") as out:
        for i in range(count):
            ticket = " ".join(rng.sample(TOPICS, rng.randint(1, 3)))
            messages = [{"role": "user", "content": f"Ticket #{i}: {ticket}"}]
            if shared_system:
                messages.insert(0, {"role": "system", "content": SYSTEM})
            body = {
                "model": "bench",
                "messages": messages,
                "max_tokens": rng.randint(max_tokens // 3, max_tokens),
                "temperature": 0,
            }
            line = {"custom_id": f"t{i}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}) + "\n")


def make_embeddings_batch(path: Path, count: int) -> None:
    """Support tickets to embed, one to three sentences each (about 20 to 60 tokens)."""
    rng = random.Random(0)
    with path.open("w") as out:
        for i in range(count):
            text = f"Ticket #{i}: " + " ".join(rng.sample(TOPICS, rng.randint(1, 3)))
            line = {"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings"}
            out.write(json.dumps({**line, "body": {"model": "bench", "input": text}}) + "\n")


DIRECT_EMBED = """
import json, sys
from vllm import LLM
inp, out, model, dtype = sys.argv[1:5]
rows = [json.loads(l) for l in open(inp)]
llm = LLM(model=model, runner="pooling", dtype=dtype, enforce_eager={eager}, seed=0)
outs = llm.embed([r["body"]["input"] for r in rows], use_tqdm=False)
with open(out, "w") as f:
    for r, o in zip(rows, outs):
        f.write(json.dumps({{"custom_id": r["custom_id"], "vector": o.outputs.embedding}}) + "\\n")
"""

DIRECT = """
import json, sys
from vllm import LLM, SamplingParams
inp, out, model, dtype = sys.argv[1:5]
rows = [json.loads(l) for l in open(inp)]
llm = LLM(model=model, dtype=dtype, enforce_eager={eager}, seed=0)
params = [SamplingParams(temperature=0, max_tokens=r["body"]["max_tokens"]) for r in rows]
outs = llm.chat([r["body"]["messages"] for r in rows], params, use_tqdm=False)
with open(out, "w") as f:
    for r, o in zip(rows, outs):
        f.write(json.dumps({{"custom_id": r["custom_id"], "text": o.outputs[0].text,
                            "tokens": len(o.outputs[0].token_ids)}}) + "\\n")
"""


def run_path(
    name: str, batch: Path, out: Path, model: str, on_gpu: bool, embeddings: bool
) -> float:
    dtype = resolve_dtype("auto", on_gpu)
    if name == "direct":
        code = (DIRECT_EMBED if embeddings else DIRECT).format(eager=not on_gpu)
        command = [sys.executable, "-c", code, str(batch), str(out), model, dtype]
    elif name == "run_batch":
        command = [
            sys.executable, "-m", "vllm.entrypoints.openai.run_batch",
            "-i", str(batch), "-o", str(out), "--model", model, "--dtype", dtype,
            "--served-model-name", "bench", "--seed", "0",
            *(["--enforce-eager"] if not on_gpu else []),
            *(["--runner", "pooling"] if embeddings else []),
        ]  # fmt: skip
    elif embeddings:  # the file's lines run on the embedding model the job names
        command = [sys.executable, "-m", "core", "run", str(batch), "-o", str(out),
                   "--embedding-model", model, "--restart"]  # fmt: skip
    else:
        command = [sys.executable, "-m", "core", "run", str(batch), "-o", str(out),
                   "--model", model, "--restart"]  # fmt: skip
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{name} failed:\n{result.stderr[-3000:]}")
    return elapsed


def answers(name: str, out: Path) -> dict[str, tuple]:
    """custom_id -> (answer, output tokens); for embeddings (vector, 0)."""
    found = {}
    for raw in out.read_text().splitlines():
        line = json.loads(raw)
        if name == "direct" and "vector" in line:
            found[line["custom_id"]] = (np.asarray(line["vector"], dtype=np.float32), 0)
        elif line.get("response") and (line["response"].get("body") or {}).get("data"):
            item = line["response"]["body"]["data"][0]["embedding"]
            found[line["custom_id"]] = (np.asarray(item, dtype=np.float32), 0)
        elif name == "direct":
            found[line["custom_id"]] = (line["text"], line["tokens"])
        elif line.get("response") and line["response"].get("body"):
            body = line["response"]["body"]
            found[line["custom_id"]] = (
                body["choices"][0]["message"]["content"],
                body["usage"]["completion_tokens"],
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--model", default=str(default_model_dir()))
    parser.add_argument("--no-shared-system", action="store_true")
    parser.add_argument("--paths", default="direct,run_batch,studio")
    parser.add_argument("--workload", choices=("chat", "embeddings"), default="chat")
    args = parser.parse_args()
    embeddings = args.workload == "embeddings"
    if embeddings and args.model == str(default_model_dir()):
        args.model = str(default_embedding_model_dir())

    on_gpu = gpu_count() > 0
    if not on_gpu:
        configure_cpu_environment(1.0)  # inherited by every path's process
    os.environ.setdefault("BATCH_STUDIO_HOME", str(scratch_folder("bench-home-")))
    work = scratch_folder("bench-")
    batch = work / "batch.jsonl"
    if embeddings:
        make_embeddings_batch(batch, args.requests)
    else:
        make_batch(batch, args.requests, args.max_tokens, not args.no_shared_system)
    paths = args.paths.split(",")
    times: dict[str, list[float]] = {p: [] for p in paths}
    results: dict[str, dict] = {}
    print(f"{args.requests} requests, max_tokens <= {args.max_tokens}, "
          f"{'GPU' if on_gpu else 'CPU'}, model {args.model}", flush=True)  # fmt: skip
    for repeat in range(args.repeats):
        for name in paths:  # interleaved, so drift on a noisy machine hits every path alike
            out = work / f"{name}-{repeat}.jsonl"
            seconds = run_path(name, batch, out, args.model, on_gpu, embeddings)
            times[name].append(seconds)
            results[name] = answers(name, out)
            print(f"  repeat {repeat + 1} {name:10s} {seconds:7.1f} s", flush=True)

    print(f"\n{'path':10s} {'median s':>9s} {'spread s':>9s} {'req/s':>7s} {'out tok/s':>10s}")
    median = {}
    for name in paths:
        median[name] = statistics.median(times[name])
        tokens = sum(t for _, t in results[name].values())
        spread = max(times[name]) - min(times[name])
        print(f"{name:10s} {median[name]:9.1f} {spread:9.1f} "
              f"{args.requests / median[name]:7.2f} {tokens / median[name]:10.1f}")  # fmt: skip
    if "studio" in median:
        for other in ("direct", "run_batch"):
            if other in median:
                ratio = median[other] / median["studio"]
                print(f"throughput ratio studio/{other}: {ratio:.3f}")
    if "direct" in results and embeddings:
        for name in paths:
            cosines = [
                float(np.dot(vector, results[name][k][0]))
                / float(np.linalg.norm(vector) * np.linalg.norm(results[name][k][0]))
                for k, (vector, _) in results["direct"].items()
            ]
            print(f"{name}: least cosine to direct {min(cosines):.6f} over {len(cosines)}")
    elif "direct" in results:
        for name in paths:
            same = sum(results[name].get(k, ("",))[0] == v[0] for k, v in results["direct"].items())
            print(f"{name}: {same}/{len(results['direct'])} answers identical to direct")


if __name__ == "__main__":
    main()
