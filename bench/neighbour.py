"""Benchmark: the engine beside other work, against vLLM's own defaults beside the same.

    .venv/bin/python bench/neighbour.py [--requests 128] [--max-tokens 48] [--before]

The same chats (temperature 0, every answer ``max_tokens`` long) run in a fresh process per
measurement, in three surroundings:

- ``quiet``: nothing else running;
- ``busy core``: another process spinning on one core the whole time;
- ``second engine``: another engine (the studio's settings) generating the whole time.

and by three contenders:

- ``vllm``: ``vllm.LLM(model).chat`` at vLLM's own defaults (its engine core in a child
  process, its own thread binding), with only the KV cache given, as a user would try it;
- ``studio cold``: the product's engine path (``core.run.engine.Engine``) in-process, as
  ``core run`` loads it; the neighbour runs from before the load;
- ``studio warm``: the same with its engine core in a child process, as the resident worker
  holds it; the neighbour starts after the model has loaded.

``vllm`` runs cold and warm too. Cold figures are load plus run; warm ones the run alone.
The last lines say, per surrounding, how many times its quiet time each took and whether
the studio stayed within 2x of its own quiet time and no slower than vLLM's defaults.
``--before`` runs the studio with the thread settings it had before 2026-12-03 (threads
bound to every core, OpenMP's spinning waits) for a before/after figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

STUDIO_VARIABLES = ("VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS", "OMP_WAIT_POLICY")
SPINNER = "while True: pass"


def prompts(count: int) -> list[str]:
    return [
        f"Ticket #{i}: my order {1000 + i} has not arrived; what should I do?" for i in range(count)
    ]


def one_run(contender: str, count: int, max_tokens: int, loaded: Path, out: Path) -> None:
    """In this fresh process: load the model the contender's way, touch ``loaded``, wait
    for the parent's go (``loaded`` removed), run the chats, write the figures to ``out``."""
    from core.config import default_model_dir

    started = time.monotonic()
    model = str(default_model_dir())
    if contender == "vllm":
        from vllm import LLM, SamplingParams

        from core.run.engine import resolve_dtype

        llm = LLM(model=model, dtype=resolve_dtype("auto", on_gpu=False))
        load = time.monotonic() - started
        params = SamplingParams(temperature=0, max_tokens=max_tokens, min_tokens=max_tokens)
        chats = [[{"role": "user", "content": p}] for p in prompts(count)]
        run = lambda: sum(len(o.outputs[0].token_ids) for o in llm.chat(chats, params))  # noqa: E731
    else:
        from core.check.requests import parse_body
        from core.run.engine import Engine
        from core.schemas import EngineConfig, JobDefaults

        engine = Engine(EngineConfig(model=model))
        load = time.monotonic() - started
        body = {"max_tokens": max_tokens, "min_tokens": max_tokens, "temperature": 0}
        requests = [
            parse_body(
                f"r{i}", {**body, "messages": [{"role": "user", "content": p}]}, JobDefaults()
            )
            for i, p in enumerate(prompts(count))
        ]

        def run() -> int:
            chunks = engine.stream(requests, window=engine.max_num_seqs)
            return sum(c.completion_tokens for chunk in chunks for _, r in chunk for c in r.choices)

    loaded.touch()
    while loaded.exists():
        time.sleep(0.05)
    begun = time.monotonic()
    tokens = run()
    seconds = time.monotonic() - begun
    written = out.with_suffix(".tmp")
    written.write_text(json.dumps({"load": load, "run": seconds, "tokens": tokens}))
    written.replace(out)  # whole, or not yet there: the parent waits for it


def second_engine(ready: Path) -> None:
    """A neighbour: the studio's engine generating until it is killed."""
    from core.check.requests import parse_body
    from core.config import default_model_dir
    from core.run.engine import Engine
    from core.schemas import EngineConfig, JobDefaults

    engine = Engine(EngineConfig(model=str(default_model_dir())))
    body = {"max_tokens": 64, "min_tokens": 64, "temperature": 0.8}
    requests = [
        parse_body(f"n{i}", {**body, "messages": [{"role": "user", "content": p}]}, JobDefaults())
        for i, p in enumerate(prompts(32))
    ]
    while True:
        for _ in engine.stream(requests, window=engine.max_num_seqs):
            ready.touch()


class Neighbour:
    """Another process busy beside the measured one, started and stopped on demand."""

    def __init__(self, kind: str, work: Path) -> None:
        self.kind, self.work, self.process = kind, work, None

    def start(self) -> None:
        if self.kind == "quiet" or self.process is not None:
            return
        if self.kind == "busy core":
            self.process = subprocess.Popen([sys.executable, "-c", SPINNER], start_new_session=True)
            return
        ready = self.work / "neighbour-ready"
        ready.unlink(missing_ok=True)
        command = [sys.executable, __file__, "--neighbour", str(ready)]
        log = self.work / "neighbour.log"
        with log.open("w") as stderr:
            self.process = subprocess.Popen(
                command,
                cwd=REPO,
                env=studio_env(before=False),
                stderr=stderr,
                start_new_session=True,
            )
        while not ready.exists():  # loaded and generating
            if self.process.poll() is not None:
                raise SystemExit(f"the second engine failed:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None:
            end_group(self.process)
            self.process = None


def end_group(process: subprocess.Popen) -> None:
    """Kills a child started in a session of its own with every process it started (an
    engine core in a child process outlives its parent otherwise)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def studio_env(before: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in STUDIO_VARIABLES}
    if before:  # the settings before 2026-12-03: bound to every core, spinning waits
        cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
        env["VLLM_CPU_OMP_THREADS_BIND"] = cores
    return env


def measure(
    contender: str, warm: bool, neighbour: Neighbour, args: argparse.Namespace, work: Path
) -> dict[str, float]:
    loaded, out = work / "loaded", work / "out.json"
    loaded.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    if contender == "vllm":
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "OMP_"))}
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"  # without it vLLM sizes the cache and fails here
    else:
        env = studio_env(args.before)
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if contender == "studio warm" else "0"
    if not warm:
        neighbour.start()
    started = time.monotonic()
    command = [sys.executable, __file__, "--one", contender, str(args.requests)]
    command += [str(args.max_tokens), str(loaded), str(out)]
    log = work / "child.log"
    with log.open("w") as stderr:
        child = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    while not loaded.exists():
        if child.poll() is not None:
            raise SystemExit(f"{contender} failed:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    if warm:
        neighbour.start()
    loaded.unlink()
    while not out.exists() and child.poll() is None:
        time.sleep(0.05)
    wall = time.monotonic() - started
    end_group(child)
    neighbour.stop()
    if not out.exists():
        raise SystemExit(f"{contender} failed:\n{log.read_text()[-3000:]}")
    figures = json.loads(out.read_text())
    # Cold: the load and the run beside the neighbour; warm: the run alone.
    figures["seconds"] = figures["run"] if warm else figures["load"] + figures["run"]
    figures["wall"] = wall
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--before", action="store_true", help="the studio's old thread settings")
    parser.add_argument("--one", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--neighbour", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        contender, count, tokens, loaded, out = args.one
        one_run(contender, int(count), int(tokens), Path(loaded), Path(out))
        return 0
    if args.neighbour:
        second_engine(Path(args.neighbour))
        return 0

    from bench.scratch import scratch_folder
    from core.model_folders import prepare_default_model

    prepare_default_model()
    work = scratch_folder("bench-neighbour-")
    print(f"CPU: {os.cpu_count()} logical cores; load average {os.getloadavg()[0]:.1f} at start")
    print(f"{args.requests} chats of {args.max_tokens} tokens, built-in chat model")
    print(f"studio settings: {'before 2026-12-03' if args.before else 'current'}")
    runs = [("vllm", False), ("vllm", True), ("studio cold", False), ("studio warm", True)]
    figures: dict[tuple[str, str, bool], dict[str, float]] = {}
    for kind in ("quiet", "busy core", "second engine"):
        neighbour = Neighbour(kind, work)
        for contender, warm in runs:
            if kind == "quiet" and contender == "vllm" and warm:
                continue  # quiet, vLLM's warm run is its cold run without the load
            got = figures[kind, contender, warm] = measure(contender, warm, neighbour, args, work)
            label = f"vllm {'warm' if warm else 'cold'}" if contender == "vllm" else contender
            print(
                f"  {kind:13s} {label:17s} {got['seconds']:6.1f} s (load {got['load']:5.1f} s,"
                f" run {got['run']:5.1f} s, {got['tokens'] / got['run']:5.1f} tokens/s;"
                f" load average {os.getloadavg()[0]:.1f})",
                flush=True,
            )

    def quiet(contender: str, warm: bool) -> float:
        if contender == "vllm" and warm:
            return figures["quiet", "vllm", False]["run"]
        return figures["quiet", contender, warm]["seconds"]

    ok = True
    for kind in ("busy core", "second engine"):
        for contender, warm in (("studio cold", False), ("studio warm", True)):
            mine = figures[kind, contender, warm]["seconds"]
            peer = figures[kind, "vllm", warm]["seconds"]
            within = mine <= 2 * quiet(contender, warm) and mine <= peer
            ok &= within
            print(
                f"{kind}: {contender} {mine:.1f} s, {mine / quiet(contender, warm):.2f}x its quiet"
                f" time; vLLM's defaults {'warm' if warm else 'cold'} {peer:.1f} s, "
                f"{peer / quiet('vllm', warm):.2f}x theirs -> {'met' if within else 'NOT MET'}"
            )
    print(f"load average at end {os.getloadavg()[0]:.1f}; goal {'met' if ok else 'not met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
