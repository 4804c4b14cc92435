"""A forced tool call's answer (``tool_choice`` ``required`` or a named function) as
OpenAI's ``message.tool_calls``: whole, or cut short by ``max_tokens``."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """The tool call a request forced (``EngineRequest.tool_choice`` and ``tool_name``):
    its answer is the JSON the engine held it to, written as ``message.tool_calls``."""

    choice: str  # "required" (a list of {"name", "arguments"}) or "function" (arguments)
    name: str | None = None  # the function a "function" choice calls


def tool_calls(text: str, call: ToolCall) -> list[dict[str, Any]] | None:
    """OpenAI's ``message.tool_calls`` read from a forced call's answer, or None where the
    answer is not the whole JSON (cut short by ``max_tokens``: :func:`cut_calls`)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if call.choice == "function":
        pairs = [(call.name, value)]
    elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
        pairs = [(v.get("name"), v.get("arguments")) for v in value]
    else:
        return None
    return openai_calls((name, json.dumps(args, ensure_ascii=False)) for name, args in pairs)


# The start of a ``required`` call as the engine writes it: compact JSON, name first.
_CALL_START = re.compile(
    r'\s*,?\s*\{\s*"name"\s*:\s*"([A-Za-z0-9_-]{1,64})"\s*,\s*"arguments"\s*:\s*'
)


def cut_calls(text: str, call: ToolCall) -> list[dict[str, Any]] | None:
    """The calls of a forced answer that ``max_tokens`` cut short, as OpenAI writes one:
    each call whose name was written, the last one's ``arguments`` the JSON text written
    so far (not valid JSON; the finish reason stays ``length``). None where not even a
    call's name was written."""
    if call.choice == "function":
        return openai_calls([(call.name, text)])
    decoder, pairs, at = json.JSONDecoder(), [], text.find("[") + 1
    if not at:
        return None
    while match := _CALL_START.match(text, at):
        start = match.end()
        try:
            arguments, end = decoder.raw_decode(text, start)
        except ValueError:
            pairs.append((match.group(1), text[start:]))
            break
        pairs.append((match.group(1), json.dumps(arguments, ensure_ascii=False)))
        at = text.find("}", end) + 1  # the call's own closing brace
        if not at:
            break
    return openai_calls(pairs) if pairs else None


def openai_calls(pairs: Any) -> list[dict[str, Any]]:
    """OpenAI's ``tool_calls`` from ``(name, arguments as a JSON string)`` pairs."""
    return [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        for name, arguments in pairs
    ]
