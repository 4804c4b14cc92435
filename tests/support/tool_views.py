"""What the tests split from tests/unit/test_tool_views.py by kind share (docs/tests.md)."""

from __future__ import annotations

from typing import Any

from core.endpoints import CHAT_URL

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}


TIME = {"type": "object", "properties": {"zone": {"type": "string"}}}


TOOLS = [
    {"type": "function", "function": {"name": "weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "time", "parameters": TIME}},
]


TWO_CALLS = '[{"name": "weather", "arguments": {"city": "Oslo"}}, {"name": "time", "arguments": {"zone": "CET"}}]'  # noqa: E501


SHOWN = 'weather({"city": "Oslo"})\ntime({"zone": "CET"})'


ONE_CALL = '{"city": "Rome"}'


def rows(answer: str, choice: Any, custom_id: str = "q") -> list[dict[str, Any]]:
    body = {"model": "m", "messages": [{"role": "user", "content": "Oslo?"}], "tools": TOOLS}
    body["tool_choice"] = choice
    line = {"custom_id": custom_id, "method": "POST", "url": CHAT_URL, "body": body}
    return [{"custom_id": custom_id, "answer": answer, "request": line}]


NAMED = {"type": "function", "function": {"name": "weather"}}
