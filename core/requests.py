"""From an OpenAI chat-completions ``body`` to what the engine runs.

Every field of a body is either mapped onto vLLM's ``SamplingParams``, known and harmless
(``model``, ``metadata``, ...), known but impossible here (tool calling, audio: a per-line
error), or unknown (a warning, never silently dropped). This module imports no vLLM: the
engine turns :class:`EngineRequest` into vLLM objects, so the mapping is testable alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

CHAT_URL = "/v1/chat/completions"
SUPPORTED_URLS = (CHAT_URL,)
ROLES = ("system", "developer", "user", "assistant")

# Fields a body may carry that change nothing about generation.
PASSIVE_FIELDS = {"model", "metadata", "user", "store", "service_tier", "stream", "messages"}
# Fields of the OpenAI schema that this engine path cannot honour: refused per line.
UNSUPPORTED_FIELDS = {
    "tools": "tool calling is not supported by the batch engine",
    "tool_choice": "tool calling is not supported by the batch engine",
    "functions": "function calling is not supported by the batch engine",
    "function_call": "function calling is not supported by the batch engine",
    "parallel_tool_calls": "tool calling is not supported by the batch engine",
    "audio": "audio output is not supported",
    "modalities": "only text output is supported",
    "prediction": "predicted outputs are not supported",
    "web_search_options": "web search is not available offline",
    "stream_options": "streaming is not available in a batch",
    "reasoning_effort": "reasoning effort is not supported by the batch engine",
}


class RequestError(ValueError):
    """A body the engine cannot run; the message names the field and what to change."""


@dataclass(frozen=True)
class JobDefaults:
    """Values used where a body leaves a field out; set once per job."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class EngineRequest:
    """One request as the engine runs it.

    Attributes:
        custom_id: the caller's id, echoed in the output line.
        messages: the conversation, each message ``{"role", "content"}`` with text content.
        sampling: keyword arguments for ``vllm.SamplingParams``.
        model: the body's ``model`` field (the name the caller asked for), if any.
        json_schema: a JSON schema (or ``{}`` for any JSON object) the answer must follow.
        warnings: problems worth telling the user that do not stop the request.
    """

    custom_id: str
    messages: list[dict[str, str]]
    sampling: dict[str, Any]
    model: str | None = None
    json_schema: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


def _number(body: dict, name: str, low: float, high: float, *, low_open: bool = False) -> float:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"body.{name} must be a number, got {value!r}")
    if value > high or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise RequestError(f"body.{name} must be in {bracket}{low}, {high}], got {value}")
    return float(value)


def _integer(body: dict, name: str, low: int, high: int | None = None) -> int:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"body.{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        upper = f" and at most {high}" if high is not None else ""
        raise RequestError(f"body.{name} must be at least {low}{upper}, got {value}")
    return value


def _message_text(index: int, content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestError(
                    f"messages[{index}].content has a {kind!r} part; the model reads text only"
                )
            if not isinstance(part.get("text"), str):
                raise RequestError(f"messages[{index}].content text part has no string 'text'")
            texts.append(part["text"])
        return "".join(texts)
    raise RequestError(
        f"messages[{index}].content must be a string or a list of text parts, got "
        f"{type(content).__name__}"
    )


def parse_messages(messages: Any) -> list[dict[str, str]]:
    """Checks a ``messages`` list and returns it with plain-text content.

    Raises:
        RequestError: empty or malformed messages, an unknown role, non-text content, no
            user message, or a conversation that ends with the assistant.
    """
    if not isinstance(messages, list) or not messages:
        raise RequestError("body.messages must be a non-empty list of messages")
    parsed = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestError(f"messages[{index}] must be an object with 'role' and 'content'")
        role = message.get("role")
        if role not in ROLES:
            hint = " (tool calling is not supported)" if role == "tool" else ""
            raise RequestError(
                f"messages[{index}].role is {role!r}; use one of {', '.join(ROLES)}{hint}"
            )
        if "content" not in message or message["content"] is None:
            raise RequestError(f"messages[{index}] ({role}) has no content")
        parsed.append({"role": role, "content": _message_text(index, message["content"])})
    if not any(m["role"] == "user" for m in parsed):
        raise RequestError("body.messages has no user message")
    if parsed[-1]["role"] == "assistant":
        raise RequestError("body.messages ends with an assistant message; end with the user's turn")
    return parsed


def _response_format(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict) or value.get("type") not in (
        "text",
        "json_object",
        "json_schema",
    ):
        raise RequestError(
            "body.response_format.type must be 'text', 'json_object' or 'json_schema'"
        )
    if value["type"] == "text":
        return None
    if value["type"] == "json_object":
        return {}
    schema = (value.get("json_schema") or {}).get("schema")
    if not isinstance(schema, dict):
        raise RequestError("body.response_format.json_schema.schema must be a JSON schema object")
    return schema


def parse_body(custom_id: str, body: dict[str, Any], defaults: JobDefaults) -> EngineRequest:
    """Maps a chat-completions body onto an :class:`EngineRequest`.

    Raises:
        RequestError: for the first problem found; its message names the field.
    """
    if body.get("stream") not in (None, False):
        raise RequestError("body.stream must be false or absent: a batch returns whole answers")
    for name, reason in UNSUPPORTED_FIELDS.items():
        if body.get(name) is not None:
            raise RequestError(f"body.{name}: {reason}")
    messages = parse_messages(body.get("messages"))

    sampling: dict[str, Any] = {
        "max_tokens": defaults.max_tokens,
        "temperature": defaults.temperature,
        "top_p": defaults.top_p,
    }
    warnings: list[str] = []
    handled = set(PASSIVE_FIELDS)

    def present(*names: str) -> bool:
        handled.update(names)
        return any(body.get(n) is not None for n in names)

    if present("max_completion_tokens", "max_tokens"):
        name = (
            "max_completion_tokens"
            if body.get("max_completion_tokens") is not None
            else ("max_tokens")
        )
        sampling["max_tokens"] = _integer(body, name, 1)
    if present("temperature"):
        sampling["temperature"] = _number(body, "temperature", 0, 2)
    if present("top_p"):
        sampling["top_p"] = _number(body, "top_p", 0, 1, low_open=True)
    if present("top_k"):
        sampling["top_k"] = _integer(body, "top_k", -1)
    if present("min_p"):
        sampling["min_p"] = _number(body, "min_p", 0, 1)
    if present("presence_penalty"):
        sampling["presence_penalty"] = _number(body, "presence_penalty", -2, 2)
    if present("frequency_penalty"):
        sampling["frequency_penalty"] = _number(body, "frequency_penalty", -2, 2)
    if present("repetition_penalty", "repeat_penalty"):
        name = (
            "repetition_penalty"
            if body.get("repetition_penalty") is not None
            else ("repeat_penalty")
        )
        sampling["repetition_penalty"] = _number(body, name, 0, 2, low_open=True)
    if present("seed"):
        sampling["seed"] = _integer(body, "seed", -(2**63), 2**63 - 1)
    if present("n"):
        sampling["n"] = _integer(body, "n", 1, 16)
    if present("min_tokens"):
        sampling["min_tokens"] = _integer(body, "min_tokens", 0)
    if present("stop"):
        stop = body["stop"]
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            raise RequestError("body.stop must be a string or a list of non-empty strings")
        sampling["stop"] = stop
    if present("logprobs", "top_logprobs"):
        top = _integer(body, "top_logprobs", 0, 20) if body.get("top_logprobs") is not None else 0
        if body.get("logprobs") is not True:
            raise RequestError("body.top_logprobs needs body.logprobs set to true")
        sampling["logprobs"] = top
    if present("logit_bias"):
        bias = body["logit_bias"]
        try:
            sampling["logit_bias"] = {int(k): float(v) for k, v in bias.items()}
        except (AttributeError, TypeError, ValueError):
            raise RequestError(
                'body.logit_bias must map token ids to numbers, e.g. {"1234": -100}'
            ) from None
    json_schema = _response_format(body["response_format"]) if present("response_format") else None

    for name in sorted(set(body) - handled):
        warnings.append(f"body.{name} is not a field the engine knows; it is ignored")
    model = body.get("model") if isinstance(body.get("model"), str) else None
    return EngineRequest(custom_id, messages, sampling, model, json_schema, warnings)
