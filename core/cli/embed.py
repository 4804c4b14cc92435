"""``embed``: texts into vectors with an embedding model folder, printed as JSON.

A one-off from a shell: it loads its own engine (the app's "similar to a typed text" asks
the resident worker's warm engine instead, :func:`core.store.text_query.embed_texts`).
It loads ``vllm.LLM(model=DIR, runner="pooling")`` once, embeds every text, and prints
``{"model", "dimensions", "vectors", "load_seconds", "embed_seconds"}`` on stdout; vLLM's
own output goes to stderr. On a 2-core CPU machine the whole command takes about 20 s
(23 s measured on a busy one), nearly all of it starting Python and loading the model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from core.cli.common import EXIT_INVALID, EXIT_USAGE

# A GPU's share for this short-lived engine: a job's worker may hold most of the GPU, and a
# small embedding model needs little (all-MiniLM-L6-v2: under 100 MB of weights).
GPU_SHARE = 0.1


def embed(model: Path, texts: list[str], gpu_share: float = GPU_SHARE) -> dict:
    """Loads ``model`` with vLLM and embeds ``texts``; returns what the command prints."""
    from core.devices import gpu_count
    from core.run.engine import configure_cpu_environment

    on_gpu = gpu_count() > 0
    if not on_gpu:
        configure_cpu_environment(1)
    from vllm import LLM

    started = time.monotonic()
    options = {"gpu_memory_utilization": gpu_share} if on_gpu else {}
    llm = LLM(model=str(model), runner="pooling", enforce_eager=not on_gpu, **options)
    loaded = time.monotonic()
    outputs = llm.embed(texts, use_tqdm=False)
    vectors = [[float(x) for x in output.outputs.embedding] for output in outputs]
    return {
        "model": str(model),
        "dimensions": len(vectors[0]) if vectors else None,
        "vectors": vectors,
        "load_seconds": round(loaded - started, 2),
        "embed_seconds": round(time.monotonic() - loaded, 3),
    }


def cmd_embed(args: argparse.Namespace) -> int:
    from core.model_folders import is_model_folder

    model = Path(args.model).expanduser()
    if not is_model_folder(model):
        print(f"error: {model} is not a model folder (config, weights, tokenizer)", file=sys.stderr)
        return EXIT_USAGE
    texts = list(args.text)
    if args.stdin:
        try:
            given = json.loads(sys.stdin.read())
        except ValueError as exc:
            print(f"error: stdin is not JSON: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if not isinstance(given, list) or not all(isinstance(t, str) for t in given):
            print("error: stdin must hold a JSON list of texts", file=sys.stderr)
            return EXIT_USAGE
        texts += given
    if not texts or any(not t.strip() for t in texts):
        print("error: give at least one text, none empty (--text or --stdin)", file=sys.stderr)
        return EXIT_USAGE
    # vLLM logs to stdout: while it runs, stdout points at stderr, so stdout holds the JSON.
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        result = embed(model, texts)
    except Exception as exc:  # vLLM refuses a folder or an input in many ways
        sys.stdout.flush()
        os.dup2(saved, 1)
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    sys.stdout.flush()
    os.dup2(saved, 1)
    os.close(saved)
    print(json.dumps(result))
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    embed_cmd = commands.add_parser(
        "embed", help="embed texts with an embedding model folder; print the vectors as JSON"
    )
    embed_cmd.add_argument("--model", required=True, help="the embedding model folder")
    embed_cmd.add_argument("--text", action="append", default=[], help="a text (repeatable)")
    embed_cmd.add_argument(
        "--stdin", action="store_true", help="read a JSON list of texts from stdin too"
    )
    embed_cmd.set_defaults(handler=cmd_embed)
