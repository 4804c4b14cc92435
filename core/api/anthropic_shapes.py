"""Anthropic's Message Batches dialect, translated to and from the OpenAI chat lines a job
runs.

A ``POST /v1/messages/batches`` request (``requests: [{custom_id, params}]``) is read into
the typed models here and each request becomes the ``/v1/chat/completions`` batch line the
product already checks and runs (:func:`chat_line`); each result line the job writes becomes
Anthropic's ``{custom_id, result}`` (:func:`succeeded`, :func:`errored`). Nothing here
runs, checks or stores anything: the job does (core/api/message_batches.py submits it).
"""

from __future__ import annotations

import json
import secrets
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.endpoints import CHAT_URL

CUSTOM_ID = r"^[a-zA-Z0-9_-]{1,64}$"  # Anthropic's rule for a request's custom_id
REQUESTS_MAX = 100_000  # requests in one batch, as Anthropic allows


class Shape(BaseModel):
    """A request object: a field this server does not know is refused by name, never
    dropped (a field it cannot honour would silently change the answer)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class TextBlock(Shape):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None  # accepted: prompts are cached anyway
    citations: list[dict[str, Any]] | None = None


class MessageParam(Shape):
    role: Literal["user", "assistant"]
    content: str | list[TextBlock]


class ToolParam(Shape):
    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,128}$")]
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    cache_control: dict[str, Any] | None = None


class ToolChoiceAuto(Shape):
    type: Literal["auto"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(Shape):
    type: Literal["any"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(Shape):
    type: Literal["tool"]
    name: str
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(Shape):
    type: Literal["none"]


ToolChoice = Annotated[
    ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone, Field(discriminator="type")
]


class Metadata(Shape):
    user_id: str | None = None


class Params(Shape):
    """A request's ``params``: the Messages API fields a batch here runs."""

    model: Annotated[str, Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)]
    messages: Annotated[list[MessageParam], Field(min_length=1)]
    system: str | list[TextBlock] | None = None
    temperature: Annotated[float, Field(ge=0, le=1)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=1)] | None = None
    stop_sequences: list[str] | None = None
    metadata: Metadata | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None
    stream: Literal[False] | None = None  # a batch returns whole answers


class BatchRequest(Shape):
    custom_id: Annotated[str, Field(pattern=CUSTOM_ID)]
    params: Params


class CreateBody(Shape):
    requests: Annotated[list[BatchRequest], Field(min_length=1, max_length=REQUESTS_MAX)]


class ShapeProblem(ValueError):
    """A create body that is not Anthropic's, with the first field at fault (and the
    custom_id of its request, where it has one) in :attr:`field`."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def _where(loc: tuple[Any, ...]) -> str:
    """``("requests", 3, "params", "temperature")`` as ``requests[3].params.temperature``
    (a union's branch, a name pydantic adds, is left out)."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in ("str", "list[TextBlock]", "float", "int") or "[" in str(part):
            continue
        else:
            text += f".{part}" if text else str(part)
    return text


def custom_id_at(body: Any, index: int) -> str | None:
    """The custom_id the raw body gives request ``index``, where it gives a string."""
    try:
        found = body["requests"][index]["custom_id"]
    except (KeyError, IndexError, TypeError):
        return None
    return found if isinstance(found, str) else None


def read_create(body: Any) -> CreateBody:
    """The create body, checked against Anthropic's shape.

    Raises:
        ShapeProblem: the first field at fault, named with its request's custom_id.
    """
    try:
        return CreateBody.model_validate(body)
    except ValidationError as exc:
        # Of a union's failures, the deepest says most (a block's type, not "a string").
        first = max(exc.errors(), key=lambda e: len(e["loc"]))
        loc, field = first["loc"], _where(first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        if len(loc) > 1 and loc[0] == "requests" and isinstance(loc[1], int):
            custom_id = custom_id_at(body, loc[1])
            named = f" (custom_id {custom_id!r})" if custom_id else ""
            inside = _where(loc[2:]) or "request"
            message = f"requests[{loc[1]}]{named}: {inside}: {message}"
        else:
            message = f"{field or 'body'}: {message}"
        raise ShapeProblem(message, field or "body") from None


def _text(content: str | list[TextBlock]) -> str | list[dict[str, str]]:
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": block.text} for block in content]


def _tool_choice(choice: Any) -> Any:
    match choice:
        case ToolChoiceAuto():
            return "auto"
        case ToolChoiceAny():
            return "required"
        case ToolChoiceTool():
            return {"type": "function", "function": {"name": choice.name}}
        case _:
            return "none"


def chat_body(params: Params) -> dict[str, Any]:
    """The OpenAI chat-completions body that asks what ``params`` asks."""
    messages: list[dict[str, Any]] = []
    if params.system:
        messages.append({"role": "system", "content": _text(params.system)})
    messages += [{"role": m.role, "content": _text(m.content)} for m in params.messages]
    body: dict[str, Any] = {
        "model": params.model,
        "max_tokens": params.max_tokens,
        "messages": messages,
    }
    for name in ("temperature", "top_p", "top_k"):
        if getattr(params, name) is not None:
            body[name] = getattr(params, name)
    if params.stop_sequences:
        body["stop"] = params.stop_sequences
    if params.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description or "",
                    "parameters": tool.input_schema,
                },
            }
            for tool in params.tools
        ]
    if params.tool_choice is not None:
        body["tool_choice"] = _tool_choice(params.tool_choice)
        if getattr(params.tool_choice, "disable_parallel_tool_use", None):
            body["parallel_tool_calls"] = False
    return body


def chat_line(request: BatchRequest) -> dict[str, Any]:
    """A request as the batch line a job runs."""
    return {
        "custom_id": request.custom_id,
        "method": "POST",
        "url": CHAT_URL,
        "body": chat_body(request.params),
    }


# What the check calls a field, in Anthropic's words (the rest keep their names).
_PARAMS = {"stop": "stop_sequences", "max_completion_tokens": "max_tokens"}


def anthropic_field(param: str | None) -> str:
    """A chat body's field, as the check names it, as the request's ``params`` field."""
    name = (param or "").removeprefix("body.")
    head, dot, rest = name.partition(".")
    return "params." + _PARAMS.get(head, head) + dot + rest if name else "params"


def anthropic_words(message: str) -> str:
    """The check's sentence about a chat body, with Anthropic's names for its fields."""
    for openai_name, name in _PARAMS.items():
        message = message.replace(f"body.{openai_name}", f"params.{name}")
    return message.replace("body.", "params.")


# -- results --------------------------------------------------------------------------------

# finish_reason -> stop_reason; "stop" is end_turn unless a stop sequence matched.
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _tool_use(call: dict[str, Any]) -> dict[str, Any] | None:
    """A ``tool_calls`` entry as a ``tool_use`` block; None when its arguments are not a
    JSON object (they are then kept as text)."""
    function = call.get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        return None
    if not isinstance(arguments, dict):
        return None
    ident = str(call.get("id") or secrets.token_hex(12)).removeprefix("call_")
    return {
        "type": "tool_use",
        "id": f"toolu_{ident}",
        "name": function.get("name"),
        "input": arguments,
    }


def message_of(body: dict[str, Any], stop_sequences: list[str]) -> dict[str, Any]:
    """A chat completion (an output line's ``response.body``) as Anthropic's ``Message``."""
    choice = body["choices"][0]
    reply = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if reply.get("content"):
        content.append({"type": "text", "text": reply["content"], "citations": None})
    for call in reply.get("tool_calls") or []:
        block = _tool_use(call)
        if block is None:
            arguments = str((call.get("function") or {}).get("arguments") or "")
            block = {"type": "text", "text": arguments, "citations": None}
        content.append(block)
    finish, matched = choice.get("finish_reason"), choice.get("stop_reason")
    stop_reason = _STOP_REASONS.get(str(finish), "end_turn")
    stop_sequence = None
    if finish == "stop" and isinstance(matched, str) and matched in stop_sequences:
        stop_reason, stop_sequence = "stop_sequence", matched
    usage = body.get("usage") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return {
        "id": "msg_" + str(body.get("id") or secrets.token_hex(12)).removeprefix("chatcmpl-"),
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or "",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        # Anthropic's input total is input + cache reads: an answer reused from an earlier
        # job (cached_tokens, docs/reuse.md) reads its prompt from the cache.
        "usage": {
            "input_tokens": prompt - cached,
            "output_tokens": int(usage.get("completion_tokens") or 0),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
        },
    }


def succeeded(custom_id: str, message: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}


def errored(custom_id: str, message: str, status_code: int) -> dict[str, Any]:
    """A request that failed: a 4xx is the request's own fault, anything else the server's."""
    kind = "invalid_request_error" if 400 <= status_code < 500 else "api_error"
    error = {"type": "error", "error": {"type": kind, "message": message}}
    return {"custom_id": custom_id, "result": {"type": "errored", "error": error}}


def not_run(custom_id: str, kind: Literal["canceled", "expired"]) -> dict[str, Any]:
    return {"custom_id": custom_id, "result": {"type": kind}}
