"""From a batch line's ``url`` and ``body`` to what the engine runs.

Endpoints: OpenAI's chat completions (``messages``; forced tool calls: :mod:`.tools`),
completions (a ``prompt``), responses (``input``, ``instructions``, ``max_output_tokens``),
embeddings (``input`` texts or token ids), and vLLM's score and rerank (:mod:`.scoring`);
the last three run on an embedding model. Every field of a body is mapped onto vLLM's
``SamplingParams``, known and harmless (``model``, ``metadata``, ...), known but impossible
here (audio: a per-line error), or unknown (a warning, never silently dropped).

Each url's parser (:data:`PARSERS`) builds that endpoint's kind of request
(:mod:`core.check.engine_requests`). This module imports no vLLM: the engine turns requests
into vLLM objects, so the mapping is testable alone.

For speed on large files, :mod:`core.check.fast_path` decodes the common shape of a chat
line straight into typed structs (validated in C by msgspec); anything it does not cover
falls back to the generic path here, which has the precise messages.
"""

from __future__ import annotations

from typing import Any

from core.check.engine_requests import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    EngineRequest,
    ScoreRequest,
)
from core.check.messages import parse_messages, role_order_warnings
from core.check.sampling import RequestError, Sampling, integer
from core.check.scoring import rerank_fields, score_fields
from core.check.tools import tool_plan
from core.endpoints import (
    CHAT_URL,
    COMPLETIONS_URL,
    EMBEDDINGS_URL,
    RERANK_URL,
    RESPONSES_URL,
    SCORE_URL,
    SUPPORTED_URLS,
)
from core.schemas import JobDefaults

MAX_EMBEDDING_INPUTS = 2048  # inputs in one embeddings request, as OpenAI allows

# Fields of the OpenAI schema that this engine path cannot honour: refused per line.
UNSUPPORTED_FIELDS = {
    "functions": "the legacy functions field is not supported; use tools",
    "function_call": "the legacy function_call field is not supported; use tool_choice",
    "audio": "audio output is not supported",
    "modalities": "only text output is supported",
    "prediction": "predicted outputs are not supported",
    "web_search_options": "web search is not available offline",
    "stream_options": "streaming is not available in a batch",
    "reasoning_effort": "reasoning effort is not supported by the batch engine",
}
COMPLETIONS_UNSUPPORTED = {
    "echo": "echo is not supported by the batch engine",
    "best_of": "best_of is not supported by the batch engine; use n",
    "suffix": "suffix (insertion) is not supported by the batch engine",
    "stream_options": "streaming is not available in a batch",
}
RESPONSES_UNSUPPORTED = {
    "tools": "tool calling runs on /v1/chat/completions only",
    "tool_choice": "tool calling runs on /v1/chat/completions only",
    "parallel_tool_calls": "tool calling runs on /v1/chat/completions only",
    "previous_response_id": "a batch line cannot continue a stored response; send the "
    "whole conversation in input",
    "conversation": "a batch line cannot continue a stored conversation; send the whole "
    "conversation in input",
    "background": "background mode does not apply to a batch",
    "reasoning": "reasoning options are not supported by the batch engine",
    "include": "include is not supported by the batch engine",
    "prompt": "stored prompts are not available offline; put the text in input",
}


# -- field checks ---------------------------------------------------------------------------


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


def _text_format(value: Any) -> dict[str, Any] | None:
    """The Responses API's ``text.format`` (``{"type": "json_schema", "schema": ...}``)."""
    if not isinstance(value, dict):
        raise RequestError("body.text must be an object such as {'format': {'type': 'text'}}")
    fmt = value.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise RequestError("body.text.format.type must be 'text', 'json_object' or 'json_schema'")
    if fmt["type"] == "text":
        return None
    if fmt["type"] == "json_object":
        return {}
    if not isinstance(fmt.get("schema"), dict):
        raise RequestError("body.text.format.schema must be a JSON schema object")
    return fmt["schema"]


def _refuse(body: dict[str, Any], unsupported: dict[str, str]) -> None:
    if body.get("stream") not in (None, False):
        raise RequestError("body.stream must be false or absent: a batch returns whole answers")
    for name, reason in unsupported.items():
        if body.get(name) is not None:
            raise RequestError(f"body.{name}: {reason}")


def _model(body: dict[str, Any]) -> str | None:
    return body.get("model") if isinstance(body.get("model"), str) else None


def parse_body(custom_id: str, body: dict[str, Any], defaults: JobDefaults) -> ChatRequest:
    """Maps a chat-completions body onto a :class:`ChatRequest`.

    Raises:
        RequestError: for the first problem found; its message names the field.
    """
    _refuse(body, UNSUPPORTED_FIELDS)
    messages = parse_messages(body.get("messages"))
    sampling = Sampling(body, defaults)
    sampling.handled.add("messages")
    sampling.common("max_completion_tokens", "max_tokens")
    sampling.penalties_and_more()
    values = sampling.values
    if sampling.present("logprobs", "top_logprobs"):
        top = integer(body, "top_logprobs", 0, 20) if body.get("top_logprobs") is not None else 0
        if body.get("logprobs") is not True:
            raise RequestError("body.top_logprobs needs body.logprobs set to true")
        values["logprobs"] = top
    json_schema = None
    if sampling.present("response_format"):
        json_schema = _response_format(body["response_format"])
    sampling.present("tools", "tool_choice", "parallel_tool_calls")
    tools = tool_plan(body)
    json_schema = tools.schema if tools.choice else json_schema  # a forced call's shape
    warnings = role_order_warnings([m["role"] for m in messages])
    warnings += sampling.unknown_field_warnings()
    return ChatRequest(
        custom_id=custom_id,
        url=CHAT_URL,
        model=_model(body),
        warnings=warnings,
        defaulted=tuple(sampling.defaulted),
        sampling=values,
        json_schema=json_schema,
        messages=messages,
        tools=tools.tools,
        tool_choice=tools.choice,
        tool_name=tools.name,
    )


def parse_completions_body(
    custom_id: str, body: dict[str, Any], defaults: JobDefaults
) -> CompletionRequest:
    """Maps a ``/v1/completions`` body (one ``prompt`` string, no chat template).

    Raises:
        RequestError: for the first problem found; its message names the field.
    """
    _refuse(body, COMPLETIONS_UNSUPPORTED)
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        raise RequestError(
            "body.prompt must be one string; put each prompt (or token list) on its own line"
        )
    if not isinstance(prompt, str) or not prompt:
        raise RequestError("body.prompt is missing; /v1/completions needs a prompt string")
    sampling = Sampling(body, defaults)
    sampling.handled.add("prompt")
    sampling.common("max_tokens")
    sampling.penalties_and_more()
    if sampling.present("logprobs"):
        sampling.values["logprobs"] = integer(body, "logprobs", 0, 20)
    warnings = sampling.unknown_field_warnings()
    return CompletionRequest(
        custom_id=custom_id,
        url=COMPLETIONS_URL,
        model=_model(body),
        warnings=warnings,
        defaulted=tuple(sampling.defaulted),
        sampling=sampling.values,
        prompt=prompt,
    )


def _responses_messages(body: dict[str, Any]) -> list[dict[str, str]]:
    """``instructions`` and ``input`` as chat messages (instructions become the system turn)."""
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise RequestError("body.instructions must be a string")
    value = body.get("input")
    if isinstance(value, str):
        if not value:
            raise RequestError("body.input is empty; give the text or a list of messages")
        messages = [{"role": "user", "content": value}]
    elif isinstance(value, list) and value:
        items = []
        for index, item in enumerate(value):
            if isinstance(item, dict) and item.get("type", "message") != "message":
                raise RequestError(
                    f"input[{index}] is a {item.get('type')!r} item; only messages are supported"
                )
            items.append(item)
        messages = parse_messages(items, "body.input")
    else:
        raise RequestError("body.input is missing; give a string or a non-empty list of messages")
    if instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    return messages


def parse_responses_body(
    custom_id: str, body: dict[str, Any], defaults: JobDefaults
) -> ChatRequest:
    """Maps a ``/v1/responses`` body: ``input``, ``instructions``, ``max_output_tokens``.

    Raises:
        RequestError: for the first problem found; its message names the field.
    """
    _refuse(body, RESPONSES_UNSUPPORTED)
    messages = _responses_messages(body)
    sampling = Sampling(body, defaults)
    sampling.handled.update(("input", "instructions", "truncation"))
    sampling.common("max_output_tokens")
    sampling.penalties_and_more()
    if sampling.values.get("n", 1) > 1:
        raise RequestError(
            "body.n: a response holds one answer; write one line per answer, or use "
            "/v1/chat/completions, which has n"
        )
    if sampling.present("top_logprobs"):
        sampling.values["logprobs"] = integer(body, "top_logprobs", 0, 20)
    json_schema = _text_format(body["text"]) if sampling.present("text") else None
    warnings = role_order_warnings([m["role"] for m in messages])
    warnings += sampling.unknown_field_warnings()
    return ChatRequest(
        custom_id=custom_id,
        url=RESPONSES_URL,
        model=_model(body),
        warnings=warnings,
        defaulted=tuple(sampling.defaulted),
        sampling=sampling.values,
        json_schema=json_schema,
        messages=messages,
    )


def _embedding_inputs(value: Any) -> list[str | list[int]]:
    """OpenAI's ``input``: a string, a list of strings, a list of token ids, or a list of
    such lists; each becomes one vector."""
    if isinstance(value, str) or (
        isinstance(value, list) and value and all(_is_token_id(t) for t in value)
    ):
        value = [value]
    if not isinstance(value, list) or not value:
        raise RequestError(
            "body.input is missing; give a string, a list of strings, or lists of token ids"
        )
    if len(value) > MAX_EMBEDDING_INPUTS:
        raise RequestError(
            f"body.input has {len(value):,} items; at most {MAX_EMBEDDING_INPUTS:,} per line"
        )
    for index, item in enumerate(value):
        if isinstance(item, str):
            if not item:
                raise RequestError(f"body.input[{index}] is empty; an input needs text")
        elif not (isinstance(item, list) and item and all(_is_token_id(t) for t in item)):
            raise RequestError(
                f"body.input[{index}] must be a non-empty string or a list of token ids"
            )
    return value


def _is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_embeddings_body(
    custom_id: str, body: dict[str, Any], defaults: JobDefaults
) -> EmbeddingRequest:
    """Maps a ``/v1/embeddings`` body: ``input``, ``encoding_format``, ``dimensions``.
    Whether each input fits the model, and ``dimensions`` its vectors, is checked with the
    model (:mod:`core.check.summary`).

    Raises:
        RequestError: for the first problem found; its message names the field.
    """
    inputs = _embedding_inputs(body.get("input"))
    encoding = body.get("encoding_format")
    if encoding is None:
        encoding = "float"
    elif encoding not in ("float", "base64"):
        raise RequestError(f"body.encoding_format must be 'float' or 'base64', got {encoding!r}")
    dimensions = None
    if body.get("dimensions") is not None:
        dimensions = integer(body, "dimensions", 1)
    # metadata: kept with the results (the Results map colours by it); vLLM ignores it.
    known = {"input", "encoding_format", "dimensions", "model", "user", "metadata"}
    warnings = [
        f"body.{name} is not a field of an embeddings request; it is ignored"
        for name in sorted(set(body) - known)
    ]
    return EmbeddingRequest(
        custom_id=custom_id,
        url=EMBEDDINGS_URL,
        model=_model(body),
        warnings=warnings,
        inputs=inputs,
        encoding_format=encoding,
        dimensions=dimensions,
    )


def parse_score_body(custom_id: str, body: dict[str, Any], defaults: JobDefaults) -> ScoreRequest:
    """Maps a ``/v1/score`` body (vLLM's shape; see :mod:`core.check.scoring`)."""
    return ScoreRequest(
        custom_id=custom_id, url=SCORE_URL, model=_model(body), **score_fields(body)
    )


def parse_rerank_body(custom_id: str, body: dict[str, Any], defaults: JobDefaults) -> ScoreRequest:
    """Maps a ``/v1/rerank`` body (vLLM's shape; see :mod:`core.check.scoring`)."""
    return ScoreRequest(
        custom_id=custom_id, url=RERANK_URL, model=_model(body), **rerank_fields(body)
    )


# The parser of each endpoint's body, by url; each builds its url's kind (engine_requests.KINDS).
PARSERS = {
    CHAT_URL: parse_body,
    COMPLETIONS_URL: parse_completions_body,
    RESPONSES_URL: parse_responses_body,
    EMBEDDINGS_URL: parse_embeddings_body,
    SCORE_URL: parse_score_body,
    RERANK_URL: parse_rerank_body,
}


def parse_request(
    url: str, custom_id: str, body: dict[str, Any], defaults: JobDefaults
) -> EngineRequest:
    """Maps a body of any served ``url`` (see :data:`SUPPORTED_URLS`).

    Raises:
        RequestError: an unknown url, or the first problem of the body.
    """
    parser = PARSERS.get(url)
    if parser is None:
        raise RequestError(f"url {url!r} is not served; use {', '.join(SUPPORTED_URLS)}")
    return parser(custom_id, body, defaults)
