"""A LoRA adapter as a model on the real engine (issue 59 item 2): one job of base and
adapter lines runs in one engine; the base's answers are a run without adapters', the
adapter's are ``vllm.LLM(enable_lora=True).chat`` given the same ``LoRARequest``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from core.run.outputs import answer_text
from tests.support.cli import cli
from tests.support.engine_child import EngineChild
from tests.support.lora import make_lora
from tests.support.warm_engine import started_job

pytestmark = pytest.mark.engine
PROMPTS = ("Name a colour.", "What is 2 + 2?", "Say hello.")


def write_batch(path: Path, models: list[str], tag: str) -> None:
    rows = [
        {"custom_id": f"{model}-{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": model, "max_tokens": 8, "temperature": 0,
                  "messages": [{"role": "user", "content": f"{prompt} ({tag})"}]}}
        for model in models
        for i, prompt in enumerate(PROMPTS)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def answers(path: Path) -> dict[str, dict]:
    return {line["custom_id"]: line for line in map(json.loads, path.read_text().splitlines())}


def test_base_and_adapter_lines_run_in_one_engine(
    warm_home: Path, default_model: Path, tmp_path: Path, engine_child: EngineChild
) -> None:
    adapter = make_lora(default_model, tmp_path / "tuned")
    tag = uuid.uuid4().hex[:6]
    base = default_model.name
    mixed, alone = tmp_path / "mixed.jsonl", tmp_path / "alone.jsonl"
    write_batch(mixed, [base, "lora"], tag)
    write_batch(alone, [base], tag)

    # The base alone first, on the SmolLM2 the warm worker holds: the engine with LoRA
    # replaces it (one copy of a model at a time), so run after, it would load it again.
    result = cli("run", str(alone), "-o", str(tmp_path / "alone.out"), "--no-reuse")
    assert result.returncode == 0, result.stderr[-2000:]
    without = answers(tmp_path / "alone.out")
    result = cli("run", str(mixed), "-o", str(tmp_path / "mixed.out"), "--no-reuse",
                 "--map", f"lora={adapter}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    job = started_job(result, warm_home)
    assert job.read_spec().adapters[str(adapter)].rank == 8
    assert "(model 1 of" not in job.read_status().message  # one engine, not one per model
    got = answers(tmp_path / "mixed.out")
    direct = engine_child.run(
        tmp_path / "direct.json", "lora", str(default_model), str(adapter), str(mixed),
        str(tmp_path / "direct.json"),
    )  # fmt: skip

    for i in range(len(PROMPTS)):
        on_base, on_adapter = got[f"{base}-{i}"], got[f"lora-{i}"]
        assert on_base["response"]["body"]["model"] == base
        assert on_adapter["response"]["body"]["model"] == "lora"
        assert answer_text(on_base) == answer_text(without[f"{base}-{i}"])
        assert answer_text(on_adapter) == direct[f"lora-{i}"]
    assert [answer_text(got[f"lora-{i}"]) for i in range(len(PROMPTS))] != [
        answer_text(got[f"{base}-{i}"]) for i in range(len(PROMPTS))
    ]  # the adapter changes the answers
