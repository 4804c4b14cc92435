"""The calls in a ``tool_choice`` ``"auto"`` answer, read by vLLM's tool parser for the
model (:func:`core.check.tool_support.auto_support` picks it from the chat template).

The model decided itself, so nothing held it to the schema: a call is kept only where it
names one of the tools and its arguments validate against that tool's parameters;
otherwise the answer stays text, as the model wrote it.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from core.check.tools import parse_tools


def read_calls(parser_name: str, tokenizer: Any, text: str, tools: list[dict[str, Any]]) -> Any:
    """``(calls, content)`` where the answer holds valid calls (each ``{"name",
    "arguments"}`` with arguments as a JSON string), else None (the answer is text)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    request = ChatCompletionRequest(
        model="batch", messages=[{"role": "user", "content": ""}], tools=tools
    )
    parser = ToolParserManager.get_tool_parser(parser_name)(tokenizer, request.tools)
    found = parser.extract_tool_calls(text, request)
    if not found.tools_called or not found.tool_calls:
        return None
    schemas = parse_tools(tools)
    calls = []
    for call in found.tool_calls:
        schema = schemas.get(call.function.name)
        try:
            arguments = json.loads(call.function.arguments)
            if schema is None:
                return None
            jsonschema.validate(arguments, schema)
        except (ValueError, jsonschema.ValidationError):
            return None
        calls.append({"name": call.function.name, "arguments": call.function.arguments})
    return calls, found.content
