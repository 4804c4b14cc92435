"""What the tests split from tests/unit/test_tools.py by kind share (docs/tests.md)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from core.endpoints import CHAT_URL


def tool(name: str, parameters: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name, "description": f"The {name} function.", **more}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}


# Parameters of the kinds function schemas use: the sweep runs each on the engine.
PARAMETERS: dict[str, dict[str, Any] | None] = {
    "none given": None,
    "empty object": {"type": "object", "properties": {}},
    "weather": WEATHER,
    "numbers": {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 1, "maximum": 9},
            "ratio": {"type": "number"},
            "ok": {"type": "boolean"},
        },
        "required": ["count", "ok"],
    },
    "nested": {
        "type": "object",
        "properties": {
            "person": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 12}},
                "required": ["name"],
            },
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2},
        },
        "required": ["person"],
    },
    "refs": {
        "type": "object",
        "$defs": {"level": {"type": "string", "enum": ["low", "high"]}},
        "properties": {"level": {"$ref": "#/$defs/level"}},
        "required": ["level"],
    },
    "pattern": {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["code"],
    },
}


PROMPT = [{"role": "user", "content": "What is the weather in Paris?"}]


CONVERSATION = [
    {"role": "system", "content": "You call tools."},
    {"role": "user", "content": "Weather in Rome?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Rome", "unit": "celsius"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_abc", "content": "21 degrees, sunny"},
    {"role": "user", "content": "And in Oslo?"},
]


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": PROMPT, "max_tokens": 48, **fields}


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def valid_bodies() -> list[dict[str, Any]]:
    """Generated bodies the check must pass: each parameters kind alone, named and
    required, parallel or not, and every pair of kinds as two tools under ``required``."""
    out = []
    for (kind, params), parallel in itertools.product(PARAMETERS.items(), (None, False, True)):
        name = kind.replace(" ", "_")
        tools = [tool(name, params)]
        extra = {} if parallel is None else {"parallel_tool_calls": parallel}
        out.append(_body(tools=tools, tool_choice=named(name), **extra))
        out.append(_body(tools=tools, tool_choice="required", temperature=0, **extra))
    for (a, pa), (b, pb) in itertools.combinations(PARAMETERS.items(), 2):
        tools = [tool(a.replace(" ", "_"), pa), tool(b.replace(" ", "_"), pb)]
        out.append(_body(tools=tools, tool_choice="required", parallel_tool_calls=False))
    out.append(_body(tools=[tool("weather", WEATHER)], tool_choice="none", max_tokens=8))
    out.append(
        _body(
            messages=CONVERSATION,
            tools=[tool("weather", WEATHER)],
            tool_choice=named("weather"),
            n=2,
            temperature=0.8,
            seed=3,
        )
    )
    out.append(_body(messages=CONVERSATION, tools=[tool("weather", WEATHER)], tool_choice="none"))
    return out


# Malformed lines, each with the field the check must name.
REFUSED: list[tuple[dict[str, Any], str]] = [
    (
        _body(tools=[tool("weather", WEATHER)], tool_choice=named("nope")),
        "body.tool_choice.function.name",
    ),
    (_body(tool_choice="required"), "body.tool_choice"),
    (_body(tools=[tool("a"), tool("a")], tool_choice="required"), "body.tools"),
    (_body(tools=[tool("a", {"type": "objekt"})], tool_choice="required"), "body.tools"),
    (
        _body(tools=[tool("a", {"type": "object", "required": "x"})], tool_choice="required"),
        "body.tools",
    ),
    (_body(tools=[tool("a", {"type": "array"})], tool_choice="required"), "body.tools"),
    (_body(tools=[tool("a b")], tool_choice="required"), "body.tools"),
    (_body(tools=[], tool_choice="required"), "body.tools"),
    (_body(tools=[{"type": "web_search"}], tool_choice="required"), "body.tools"),
    (
        _body(tools=[tool("a")], tool_choice="required", parallel_tool_calls="yes"),
        "body.parallel_tool_calls",
    ),
    (
        _body(
            messages=[*PROMPT, {"role": "tool", "tool_call_id": "call_x", "content": "1"}],
            tools=[tool("a")],
            tool_choice="none",
        ),
        "body.messages",
    ),
    (_body(messages=[*PROMPT, {"role": "tool", "content": "1"}]), "body.messages"),
    (
        _body(tools=[tool("a")], tool_choice="required", response_format={"type": "json_object"}),
        "body.response_format",
    ),
]


def _write(path: Path, bodies: list[dict[str, Any]]) -> None:
    with path.open("w") as out:
        for index, body in enumerate(bodies):
            line = {"custom_id": f"t{index}", "method": "POST", "url": CHAT_URL, "body": body}
            out.write(json.dumps(line) + "\n")
