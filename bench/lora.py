"""Benchmark: the cost of LoRA on this CPU (issue 59's figure).

    .venv/bin/python bench/lora.py                      # 128 lines of 16 tokens, 1 round
    .venv/bin/python bench/lora.py --lines 600 --rounds 3

Two rank-8 adapters are made with peft on ``q_proj`` and ``v_proj`` of the built-in
SmolLM2 (as ``tests/engine/test_lora_engine.py`` makes them: random B, so their answers
differ from the base's) and mapped to the names ``ft-a`` and ``ft-b``. Three files of
``--lines`` chats (prompts of the same form, new in each job so that no job finds another's
in the engine's prefix cache; temperature 0, ``--max-tokens`` each):

- **base alone**: every line names the base model;
- **LoRA mix**: the lines split evenly over the base, ``ft-a`` and ``ft-b``: one job on
  one engine with LoRA on, each request with its own adapter (or none);
- **LoRA on, base lines**: every line on the base but one on each adapter, so the job runs
  on the same engine with LoRA on as the mix: what LoRA being on costs the base's lines,
  apart from the adapters' own matrices.

Every job goes through ``submit()`` to one resident worker, in a scratch data folder with
reuse off. The engine with LoRA and the one without are different engines (loading one
replaces the other), so before each timed job an untimed 6-line job of the same kind loads
its engine; the timed job's ``model_load_seconds`` is checked to be 0 (warm). A round times
the three in this order (the last on the mix's engine); the figures are the medians over
``--rounds`` and their ratios to the base alone. The CPU and the load average (start and
end) are printed, as these machines are shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scratch import scratch_folder  # noqa: E402
from bench.share import chat_batch  # noqa: E402

ADAPTERS = ("ft-a", "ft-b")
MODES = {  # in the order a round runs them
    "base": "base alone",
    "mix": "LoRA mix (a third each on the base and the two adapters)",
    "lora-on": "LoRA on, base lines (one line on each adapter)",
}


VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")  # what vLLM's CPU kernels use


def cpu_name() -> str:
    """The CPU's model name and vector units (``/proc/cpuinfo``), with the logical cores
    this process sees."""
    name, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name == (platform.processor() or "unknown CPU"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    units = "/".join(f.upper() for f in VECTOR_FLAGS if f in flags) or "no AVX2"
    return f"{name} ({units}), {os.cpu_count()} logical cores"


class Runner:
    """Submits jobs to the scratch home's resident worker and waits for them."""

    def __init__(self, home: Path, max_tokens: int, adapters: dict[str, Path]) -> None:
        from core.config import default_model_dir

        self.home, self.max_tokens, self.count = home, max_tokens, 0
        self.base = default_model_dir()
        self.adapters = adapters

    def models(self, n: int, mode: str) -> list[str]:
        """The model of each of ``n`` lines in ``mode`` (``base``, ``mix`` or ``lora-on``)."""
        if mode == "mix":
            return [[self.base.name, *ADAPTERS][i % 3] for i in range(n)]
        if mode == "lora-on":
            return [*ADAPTERS, *[self.base.name] * (n - len(ADAPTERS))]
        return [self.base.name] * n

    def run(self, n: int, mode: str, tag: str) -> tuple[float, float]:
        """One job of ``n`` lines, submit to completion: its wall time and the model load
        its status recorded."""
        from core.jobs.submit import Submission, submit
        from core.schemas import EngineConfig

        self.count += 1
        models = self.models(n, mode)
        name = f"{mode}{self.count}.jsonl"
        batch = chat_batch(self.home / name, n, tag, self.max_tokens, tuple(models))
        model_map = {self.base.name: str(self.base)}
        model_map |= {name: str(folder) for name, folder in self.adapters.items()}
        settings = Submission(engine=EngineConfig(model=str(self.base)), model_map=model_map,
                              reuse=False)  # fmt: skip
        started = time.monotonic()
        job = submit(batch, settings).job
        while not (status := job.read_status()).is_final:
            time.sleep(0.05)
        wall = time.monotonic() - started
        assert status.state == "completed" and status.succeeded == n, status
        named = {json.loads(raw)["response"]["body"]["model"] for raw in job.output.open()}
        assert named == set(models), named  # each answer names the model that made it
        return wall, status.model_load_seconds or 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=128, help="lines of each timed job")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()

    home = scratch_folder("bench-lora-")
    os.environ["BATCH_STUDIO_HOME"] = str(home)
    os.environ["BATCH_STUDIO_ENGINE_IDLE"] = "3600"
    os.environ["BATCH_STUDIO_REUSE"] = "0"
    from core.model_folders import prepare_default_model
    from tests.support.lora import make_lora

    base = prepare_default_model()
    print(f"CPU: {cpu_name()}; load average {os.getloadavg()[0]:.1f} at start", flush=True)
    made = time.monotonic()
    adapters = {
        name: make_lora(base, home / "adapters" / name, seed=seed)
        for seed, name in enumerate(ADAPTERS, start=1)
    }
    print(f"two rank-8 adapters made with peft in {time.monotonic() - made:.1f} s", flush=True)
    runner = Runner(home, args.max_tokens, adapters)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for r in range(args.rounds):
        for letter, mode in zip("abc", MODES, strict=True):
            if mode != "lora-on":  # lora-on runs on the mix's engine, loaded already
                runner.run(6, mode, f"w{r}{letter}")  # loads this kind's engine, untimed
            wall, load = runner.run(args.lines, mode, f"t{r}{letter}")  # tags of one length
            assert load == 0, f"the timed {mode} job loaded its model ({load:.1f} s): not warm"
            times[mode].append(wall)
        alone = times["base"][-1]
        print(f"round {r + 1}: " + ", ".join(
            f"{MODES[m]} {t[-1]:.1f} s ({t[-1] / alone:.2f}x)" for m, t in times.items()
        ), flush=True)  # fmt: skip

    med = statistics.median
    alone = med(times["base"])
    print(f"\n{args.lines} chats of {args.max_tokens} tokens, {args.rounds} round(s), medians "
          f"(adapters {ADAPTERS[0]} and {ADAPTERS[1]}, rank 8):")  # fmt: skip
    for mode, label in MODES.items():
        t = med(times[mode])
        rate = args.lines / t
        print(f"  {label}: {t:.1f} s ({rate:.1f} lines/s), {t / alone:.2f}x the base alone")
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    subprocess.run([sys.executable, "-m", "core", "engine", "stop"], cwd=ROOT,
                   capture_output=True, check=False)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
