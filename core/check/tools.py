"""Tool calls in a chat body: ``tools``, ``tool_choice``, ``parallel_tool_calls``, and the
tool turns of a conversation (an assistant's ``tool_calls``, a ``tool`` result).

A forced call (``tool_choice`` ``"required"`` or a named function) runs on any chat model:
the engine's structured output holds the answer to a JSON schema built here, and
:mod:`core.run.outputs` turns the answer into OpenAI's ``message.tool_calls``. ``"none"``
runs as a plain chat (the tools are not rendered). ``"auto"`` (the default with tools)
lets the model decide, which needs a chat template that renders the tools and a parser for
the model's own call syntax: whether a model folder has both is
:func:`core.check.tool_support.auto_support`, checked with the model.

Each rule about a tool lives here once; :func:`core.check.requests.parse_body` calls it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from core.check.sampling import RequestError

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for a function's name
EMPTY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}
REQUIRED = "required"  # ChatRequest.tool_choice: the model calls one or more of the tools
NAMED = "function"  # ChatRequest.tool_choice: the model calls the function named
AUTO = "auto"  # ChatRequest.tool_choice: the model decides (its template renders tools)
DEFINITIONS = ("$defs", "definitions")  # where JSON Schema keeps what "$ref" points at


@dataclass(frozen=True)
class ToolPlan:
    """What a body's tools ask of the engine.

    Attributes:
        choice: ``required``, ``function`` (a named function), ``auto`` or None (no call
            is made).
        name: the function a named choice forces.
        schema: the JSON schema the answer is held to (None when no call is made).
        parameters: each function's parameters schema, by name.
        tools: the body's ``tools`` for an ``auto`` choice (the template renders them).
    """

    choice: str | None = None
    name: str | None = None
    schema: dict[str, Any] | None = None
    parameters: dict[str, dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None


def _parameters(index: int, function: dict[str, Any]) -> dict[str, Any]:
    where = f"body.tools[{index}].function.parameters"
    params = function.get("parameters")
    if params is None:
        return dict(EMPTY_OBJECT)
    if not isinstance(params, dict):
        raise RequestError(f"{where} must be a JSON Schema object, got {type(params).__name__}")
    # Imported here: the check's helper processes meet few tool lines (0.1 s of CPU each).
    import jsonschema

    try:
        jsonschema.validators.validator_for(params).check_schema(params)
    except jsonschema.SchemaError as exc:
        at = "/".join(str(p) for p in exc.absolute_path)
        raise RequestError(
            f"{where} is not a valid JSON Schema{f' (at {at})' if at else ''}: {exc.message}"
        ) from None
    if params.get("type", "object") != "object":
        raise RequestError(
            f"{where}.type is {params['type']!r}; a call's arguments are a JSON object, so "
            "its schema needs type 'object'"
        )
    return params


def parse_tools(value: Any) -> dict[str, dict[str, Any]]:
    """The ``tools`` list as each function's parameters schema, by name.

    Raises:
        RequestError: not a list of function tools, a bad or repeated name, or parameters
            that are not a JSON Schema of an object.
    """
    if not isinstance(value, list) or not value:
        raise RequestError("body.tools must be a non-empty list of function tools")
    functions: dict[str, dict[str, Any]] = {}
    for index, tool in enumerate(value):
        where = f"body.tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise RequestError(f"{where}.type is {kind!r}; only 'function' tools are supported")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise RequestError(f"{where}.function must be an object with a 'name'")
        name = function.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise RequestError(
                f"{where}.function.name must be 1-64 letters, digits, '_' or '-', got {name!r}"
            )
        if name in functions:
            raise RequestError(f"{where}.function.name {name!r} is already the name of a tool")
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise RequestError(f"{where}.function.description must be a string")
        functions[name] = _parameters(index, function)
    return functions


def _choice(value: Any, functions: dict[str, dict[str, Any]]) -> tuple[str | None, str | None]:
    """``(choice, name)`` for a ``tool_choice`` (the default with tools is ``auto``)."""
    if value is None or value == AUTO:
        return AUTO, None
    if value == "none":
        return None, None
    if value == REQUIRED:
        return REQUIRED, None
    if isinstance(value, dict) and value.get("type") == "function":
        name = (value.get("function") or {}).get("name")
        if name not in functions:
            known = ", ".join(repr(n) for n in functions)
            raise RequestError(
                f"body.tool_choice.function.name {name!r} names no tool; the tools are {known}"
            )
        return NAMED, name
    raise RequestError(
        "body.tool_choice must be 'none', 'auto', 'required' or "
        '{"type": "function", "function": {"name": ...}}'
    )


def forced_schema(
    choice: str | None,
    name: str | None,
    functions: dict[str, dict[str, Any]],
    parallel: bool,
) -> dict[str, Any] | None:
    """The JSON schema the engine holds the answer to: for a named function its parameters;
    for ``required`` a list of ``{"name", "arguments"}`` calls, each one of the tools (one
    call only when ``parallel_tool_calls`` is false)."""
    if choice in (None, AUTO):
        return None
    if choice == NAMED:
        return functions[name or ""]
    calls, defs = [], {}
    for tool, params in functions.items():
        # "#/$defs/..." (or "#/definitions/...") references point at the root: each
        # tool's definitions move there.
        for keyword in DEFINITIONS:
            for key, value in (params.get(keyword) or {}).items():
                if defs.setdefault(keyword, {}).setdefault(key, value) != value:
                    raise RequestError(
                        f"body.tools: two tools define {keyword}.{key} differently; with "
                        "tool_choice 'required' they share one schema, so rename one"
                    )
        arguments = {k: v for k, v in params.items() if k not in DEFINITIONS}
        calls.append(
            {
                "type": "object",
                "properties": {"name": {"enum": [tool]}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": calls}}
    if not parallel:
        schema["maxItems"] = 1
    schema.update(defs)
    return schema


def tool_plan(body: dict[str, Any]) -> ToolPlan:
    """What the body's ``tools``, ``tool_choice`` and ``parallel_tool_calls`` ask for.

    Raises:
        RequestError: malformed tools, a ``tool_choice`` naming no tool, or a
            ``tool_choice`` without tools.
    """
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise RequestError("body.parallel_tool_calls must be true or false")
    if body.get("tools") is None:
        if body.get("tool_choice") not in (None, "none"):
            raise RequestError("body.tool_choice needs body.tools: there is no tool to call")
        return ToolPlan()
    functions = parse_tools(body["tools"])
    choice, name = _choice(body.get("tool_choice"), functions)
    if choice is not None and body.get("response_format") is not None:
        raise RequestError(
            "body.response_format and a tool call both set the answer's shape; use one"
        )
    schema = forced_schema(choice, name, functions, parallel is not False)
    return ToolPlan(choice, name, schema, functions, body["tools"] if choice == AUTO else None)


# -- the tool turns of a conversation --------------------------------------------------------


def call_text(index: int, calls: Any) -> tuple[str, list[str]]:
    """An assistant's ``tool_calls`` as the text the model sees (the JSON the engine makes
    it write for ``required``: ``[{"name", "arguments"}]``), and the calls' ids.

    Raises:
        RequestError: a call that is not OpenAI's ``{"id", "type": "function",
            "function": {"name", "arguments"}}``.
    """
    where = f"messages[{index}].tool_calls"
    if not isinstance(calls, list) or not calls:
        raise RequestError(f"{where} must be a non-empty list of calls")
    shown, ids = [], []
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(function, dict)
            or call.get("type", "function") != "function"
            or not isinstance(call.get("id"), str)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)
        ):
            raise RequestError(
                f"{where}[{number}] must be {{'id': str, 'type': 'function', 'function': "
                "{'name': str, 'arguments': a JSON string}}"
            )
        try:
            arguments = json.loads(function["arguments"])
        except ValueError:
            arguments = function["arguments"]  # shown as the text it is
        shown.append({"name": function["name"], "arguments": arguments})
        ids.append(call["id"])
    return json.dumps(shown, ensure_ascii=False), ids


def check_tool_result(index: int, message: dict[str, Any], call_ids: set[str]) -> None:
    """A ``tool`` message answers a call an earlier assistant message made.

    Raises:
        RequestError: no ``tool_call_id``, or one that no earlier call has.
    """
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise RequestError(f"messages[{index}].tool_call_id is missing; name the call answered")
    if call_id not in call_ids:
        raise RequestError(
            f"messages[{index}].tool_call_id {call_id!r} answers no tool call of an earlier "
            "assistant message"
        )


def tool_turn(index: int, message: dict[str, Any], call_ids: set[str]) -> str | None:
    """The text of an assistant message's ``tool_calls`` (None where it has none), whose
    ids join ``call_ids``; a ``tool`` message is checked against them.

    Raises:
        RequestError: a malformed call, or a tool message answering no earlier call.
    """
    if message.get("role") == "tool":
        check_tool_result(index, message, call_ids)
    if message.get("role") != "assistant" or message.get("tool_calls") is None:
        return None
    shown, ids = call_text(index, message["tool_calls"])
    call_ids.update(ids)
    return shown


def forced_tool(name: str, parameters: str, description: str = "") -> dict[str, Any]:
    """The ``tools`` and ``tool_choice`` of a body whose answer is a call of one function,
    from its name and its parameters' JSON Schema as pasted text (the builder's tool call).

    Raises:
        RequestError: the text is not JSON, or the tool breaks a rule of :func:`tool_plan`.
    """
    try:
        schema = json.loads(parameters)
    except ValueError as exc:
        raise RequestError(f"the tool's parameters are not JSON: {exc}") from None
    function: dict[str, Any] = {"name": name, "parameters": schema}
    if description:
        function["description"] = description
    fields = {
        "tools": [{"type": "function", "function": function}],
        "tool_choice": {"type": "function", "function": {"name": name}},
    }
    tool_plan(fields)  # the same rules as the check's
    return fields
