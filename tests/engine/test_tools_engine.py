"""The engine tests of tests/unit/test_tools.py (split from it by kind; docs/tests.md).

Tool calls: the check of ``tools`` and tool turns, the output lines, and a sweep of
generated tools lines through the check and the real engine.

A forced call (``tool_choice`` ``required`` or a named function) must come back as
OpenAI's ``message.tool_calls`` whose arguments parse and validate against the function's
schema; every line the check passes must run; every malformed one is refused with its line
number and field before a model loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from core.check import check_file
from core.endpoints import CHAT_URL
from core.schemas import JobDefaults
from tests.support.cli import cli
from tests.support.conformance import validate_line
from tests.support.tools import (
    REFUSED,
    WEATHER,
    _body,
    _write,
    named,
    tool,
    valid_bodies,
)

# Lines "auto" (the default with tools), which SmolLM2 cannot run: its template does not
# render tools (refused by the check with the model; see tests/unit/test_tool_auto.py).
AUTO_ON_SMOLLM2: list[tuple[dict[str, Any], str]] = [
    (_body(tools=[tool("weather", WEATHER)]), "body.tool_choice"),
    (_body(tools=[tool("weather", WEATHER)], tool_choice="auto"), "body.tool_choice"),
]


def _schema_of(body: dict[str, Any], name: str) -> dict[str, Any]:
    [params] = [
        t["function"].get("parameters") for t in body["tools"] if t["function"]["name"] == name
    ]
    return params or {"type": "object", "properties": {}}


@pytest.mark.engine
def test_every_tools_line_the_check_passes_runs_and_calls_with_valid_arguments(
    warm_home, tmp_path: Path, default_model: Path
):
    bodies = valid_bodies() + [body for body, _ in REFUSED + AUTO_ON_SMOLLM2]
    path, out = tmp_path / "tools.jsonl", tmp_path / "out.jsonl"
    _write(path, bodies)
    report = check_file(path, JobDefaults(), model_folder=default_model)
    refused = sorted(p.line for p in report.errors)
    # The check passes every generated line and refuses every malformed one, by line.
    assert refused == list(range(len(valid_bodies()) + 1, len(bodies) + 1))

    result = cli("run", str(path), "-o", str(out), "--skip-invalid")
    assert result.returncode == 4, result.stderr[-2000:]  # completed, the refused lines failed
    lines = {json.loads(raw)["custom_id"]: json.loads(raw) for raw in out.read_text().splitlines()}
    assert len(lines) == len(bodies)
    called = 0
    for index, body in enumerate(valid_bodies()):
        line = lines[f"t{index}"]
        assert line["error"] is None, f"{line['error']} ({body})"  # the engine took it
        parsed = validate_line(line, CHAT_URL)
        for choice in parsed.choices:
            if body["tool_choice"] == "none":
                assert choice.message.tool_calls is None and choice.finish_reason != "tool_calls"
                continue
            if choice.finish_reason == "length":  # cut short: the calls begun, or text
                assert (choice.message.tool_calls is None) != (choice.message.content is None)
                continue
            called += 1
            assert choice.finish_reason == "tool_calls" and choice.message.content is None
            for call in choice.message.tool_calls:
                if isinstance(body["tool_choice"], dict):
                    assert call.function.name == body["tool_choice"]["function"]["name"]
                schema = _schema_of(body, call.function.name)
                jsonschema.validate(json.loads(call.function.arguments), schema)
            if body.get("parallel_tool_calls") is False and body["tool_choice"] == "required":
                assert len(choice.message.tool_calls) == 1
    # A few answers run out of max_tokens inside a long string or list (SmolLM2 rambles).
    assert called >= 0.7 * sum(b["tool_choice"] != "none" for b in valid_bodies())


TRIAGE = {
    "type": "object",
    "properties": {
        "priority": {"type": "string", "enum": ["urgent", "normal", "low"]},
        "team": {"type": "string", "enum": ["billing", "technical", "account"]},
        "summary": {"type": "string", "maxLength": 60},
    },
    "required": ["priority", "team", "summary"],
    "additionalProperties": False,
}


TICKETS = [
    "My card was charged twice for the March invoice, please refund one charge.",
    "The app crashes every time I open the settings screen since the last update.",
]


@pytest.mark.engine
def test_forced_calls_fit_in_64_tokens_as_compact_json(warm_home, tmp_path: Path):
    """Issue 38: with max_tokens 64, forced calls spent their tokens on whitespace inside
    the guided JSON and came back as text; compact JSON fits, as OpenAI's calls do."""
    bodies = [
        _body(
            messages=[{"role": "user", "content": f"Triage this ticket: {ticket}"}],
            tools=[tool("triage", TRIAGE)],
            tool_choice=choice,
            max_tokens=64,
            temperature=0,
            **({"parallel_tool_calls": False} if choice == "required" else {}),
        )
        for ticket in TICKETS
        for choice in (named("triage"), "required")
    ]
    path, out = tmp_path / "triage.jsonl", tmp_path / "out.jsonl"
    _write(path, bodies)
    result = cli("run", str(path), "-o", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    for raw in out.read_text().splitlines():
        parsed = validate_line(json.loads(raw), CHAT_URL)
        [choice] = parsed.choices
        assert choice.finish_reason == "tool_calls", choice
        [call] = choice.message.tool_calls
        assert call.function.name == "triage"
        jsonschema.validate(json.loads(call.function.arguments), TRIAGE)
        assert parsed.usage.completion_tokens < 64
