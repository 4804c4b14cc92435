"""The engine tests of tests/unit/test_tool_auto.py (split from it by kind; docs/tests.md).

``tool_choice`` ``"auto"``: the model decides whether to call a tool. It runs where the
model folder's chat template renders the tools and a vLLM tool parser reads the model's
call syntax; elsewhere (the built-in SmolLM2, whose template ignores tools) every entry
point refuses the line with that reason, by line and field, before a model loads.

The runnable folder here is the built-in SmolLM2 with a Hermes (Qwen2.5-style) tool
template beside its weights: the same model, told of the tools, read by vLLM's ``hermes``
parser."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from core.endpoints import CHAT_URL
from tests.support.cli import cli
from tests.support.conformance import validate_line
from tests.support.tool_auto import WEATHER, auto_line


@pytest.mark.engine
def test_auto_lines_run_on_a_tools_template_and_calls_validate(
    warm_home: Path, hermes_model: Path, tmp_path: Path
):
    lines = [auto_line(f"a{i}", temperature=0, seed=i) for i in range(3)]
    lines.append(auto_line("n", "none"))
    path, out = tmp_path / "auto.jsonl", tmp_path / "out.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = cli("run", str(path), "-o", str(out), "--model", str(hermes_model))
    assert result.returncode == 0, result.stderr[-2000:]
    got = {json.loads(raw)["custom_id"]: json.loads(raw) for raw in out.read_text().splitlines()}
    called = 0
    for custom_id, line in got.items():
        choice = validate_line(line, CHAT_URL).choices[0]
        if choice.message.tool_calls:
            assert custom_id != "n" and choice.finish_reason == "tool_calls"
            for call in choice.message.tool_calls:
                assert call.function.name == "get_weather"
                jsonschema.validate(json.loads(call.function.arguments), WEATHER)
            called += 1
        else:
            assert choice.message.content is not None
    # Shown one call, the model calls the tool for Paris (greedy: the same every run).
    assert called >= 1, [g["response"]["body"]["choices"][0]["message"] for g in got.values()]
