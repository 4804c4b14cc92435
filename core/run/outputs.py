"""Output lines in the format OpenAI's Batch API and vLLM's ``run_batch`` write.

A line is ``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}``;
a success carries the endpoint's body (``chat.completion``, ``text_completion``,
``response``), a failure ``body: null`` and an ``error`` object (OpenAI's error fields:
``code``, ``message``, ``param``, ``type``, and the input ``line`` where known).
``tests/unit/test_conformance.py`` validates real output against the ``openai`` SDK's types and
vLLM's own output models. Where the engine measured it, a success also carries
``latency_ms``: the milliseconds from the request entering the engine to its final output
(an extra top-level field, as ``node_id`` and ``chain_sha256`` are; readers of the OpenAI
format ignore it).
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.endpoints import (
    CHAT_URL,
    COMPLETIONS_URL,
    EMBEDDINGS_URL,
    RERANK_URL,
    RESPONSES_URL,
    SCORE_URL,
)
from core.run.tool_calls import ToolCall, cut_calls, openai_calls, tool_calls

Sampling = Mapping[str, Any]  # what a request ran with: ``GeneratedRequest.sampling``


@dataclass
class Choice:
    """One generated answer (a request with ``n`` > 1 has several)."""

    text: str
    finish_reason: str | None
    completion_tokens: int
    stop_reason: int | str | None = None
    logprobs: list[dict[str, Any]] | None = None
    calls: list[dict[str, Any]] | None = None  # an "auto" answer's calls, read by its parser


@dataclass
class Completion:
    """What the engine produced for one request, free of vLLM types."""

    prompt_tokens: int
    choices: list[Choice] = field(default_factory=list)
    cached_tokens: int = 0
    latency_ms: int | None = None  # entering the engine to the final output; None if unknown


@dataclass
class Embeddings:
    """What the engine produced for one embeddings request: a vector per input, in order."""

    prompt_tokens: int
    vectors: list[Any]  # float32 arrays (numpy, or anything with ``tolist``)
    encoding_format: str = "float"  # how the body writes them: float lists or base64
    latency_ms: int | None = None
    scores: list[float] | None = None  # a cross-encoder's score of each pair (no vectors)


def _ids() -> tuple[str, str]:
    return f"batch_req_{uuid.uuid4().hex}", f"req_{uuid.uuid4().hex}"


def _usage(completion: Completion) -> tuple[int, int]:
    return completion.prompt_tokens, sum(c.completion_tokens for c in completion.choices)


def _completions_usage(completion: Completion) -> dict[str, Any]:
    """The ``usage`` object of the chat and text completion endpoints."""
    prompt_tokens, completion_tokens = _usage(completion)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": completion.cached_tokens},
    }


def _chat_choice(index: int, choice: Choice, call: ToolCall | None) -> dict[str, Any]:
    """One choice; a forced call's answer becomes ``tool_calls`` with ``content`` null and
    finish reason ``tool_calls``. An answer cut short by ``max_tokens`` keeps finish reason
    ``length`` and is still the calls it began (:func:`cut_calls`), as OpenAI writes it."""
    message: dict[str, Any] = {"role": "assistant", "content": choice.text}
    finish_reason = choice.finish_reason
    calls = tool_calls(choice.text, call) if call is not None else None
    if calls is not None:
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        finish_reason = "tool_calls"
    elif call is not None and finish_reason == "length" and (cut := cut_calls(choice.text, call)):
        message = {"role": "assistant", "content": None, "tool_calls": cut}
    elif choice.calls:  # "auto": the model called, perhaps after some text
        calls = openai_calls((c["name"], c["arguments"]) for c in choice.calls)
        message = {"role": "assistant", "content": choice.text or None, "tool_calls": calls}
        finish_reason = "tool_calls"
    return {
        "index": index,
        "message": message,
        "logprobs": {"content": choice.logprobs} if choice.logprobs is not None else None,
        "finish_reason": finish_reason,
        "stop_reason": choice.stop_reason,
    }


def _chat_body(
    model: str, completion: Completion, sampling: Sampling, call: ToolCall | None = None
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            _chat_choice(index, choice, call) for index, choice in enumerate(completion.choices)
        ],
        "usage": _completions_usage(completion),
    }


def _text_completion_body(model: str, completion: Completion, sampling: Sampling) -> dict:
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": index,
                "text": choice.text,
                "logprobs": _completions_logprobs(choice.logprobs),
                "finish_reason": choice.finish_reason,
                "stop_reason": choice.stop_reason,
            }
            for index, choice in enumerate(completion.choices)
        ],
        "usage": _completions_usage(completion),
    }


def _completions_logprobs(content: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The legacy completions ``logprobs`` (parallel lists) from the chat-shaped entries;
    ``text_offset`` counts characters from the start of the answer."""
    if content is None:
        return None
    offsets, at = [], 0
    for item in content:
        offsets.append(at)
        at += len(item["token"])
    return {
        "tokens": [item["token"] for item in content],
        "token_logprobs": [item["logprob"] for item in content],
        "top_logprobs": [
            {top["token"]: top["logprob"] for top in item["top_logprobs"]} for item in content
        ],
        "text_offset": offsets,
    }


def _response_body(model: str, completion: Completion, sampling: Sampling) -> dict:
    """OpenAI's Responses object: one assistant message with the answer (the check allows
    one answer per Responses request). It echoes the settings the request ran with, as
    OpenAI does, and says that no tool could be called."""
    prompt_tokens, completion_tokens = _usage(completion)
    choice = completion.choices[0]
    truncated = choice.finish_reason == "length"
    text: dict[str, Any] = {"type": "output_text", "text": choice.text, "annotations": []}
    if choice.logprobs is not None:
        text["logprobs"] = choice.logprobs
    body = {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if truncated else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "model": model,
        "output": [
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex}",
                "status": "incomplete" if truncated else "completed",
                "role": "assistant",
                "content": [text],
            }
        ],
        "parallel_tool_calls": False,
        "tool_choice": "none",
        "tools": [],
        "temperature": sampling.get("temperature", 1.0),
        "top_p": sampling.get("top_p", 1.0),
        "max_output_tokens": sampling.get("max_tokens"),
        "background": False,
        "service_tier": "default",
        "truncation": "disabled",
        "usage": {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {
                "cached_tokens": completion.cached_tokens,
                "cache_write_tokens": 0,
            },
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    if choice.logprobs is not None:
        body["top_logprobs"] = sampling.get("logprobs") or 0
    return body


def _embedding_body(model: str, result: Embeddings, sampling: Sampling) -> dict[str, Any]:
    """OpenAI's embeddings list; ``base64`` is the little-endian float32 bytes, as OpenAI
    writes them (``numpy.frombuffer(base64.b64decode(s), "<f4")`` reads them back)."""

    def written(vector: Any) -> list[float] | str:
        values = np.asarray(vector, dtype="<f4")
        if result.encoding_format == "base64":
            return base64.b64encode(values.tobytes()).decode("ascii")
        return values.tolist()

    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": written(vector)}
            for index, vector in enumerate(result.vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
    }


@dataclass(frozen=True)
class ScoreLayout:
    """How a score or rerank request's vectors pair up (from its ``EngineRequest``): the
    first ``queries`` vectors are the queries, the rest the documents."""

    queries: int
    documents: list[str]  # the documents' texts, which a rerank result echoes
    top_n: int = 0  # rerank: how many of the ranked documents to write (0: all)


def cosine(a: Any, b: Any) -> float:
    """The cosine similarity of two vectors (a bi-encoder's score of a pair)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def pair_scores(result: Embeddings, layout: ScoreLayout) -> list[float]:
    """Each pair's score, in vLLM's pairing: one query against every document, or the
    i-th query against the i-th document. A cross-encoder scored each pair itself."""
    if result.scores is not None:
        return list(result.scores)
    queries, documents = result.vectors[: layout.queries], result.vectors[layout.queries :]
    if len(queries) == 1:
        return [cosine(queries[0], d) for d in documents]
    return [cosine(q, d) for q, d in zip(queries, documents, strict=True)]


def _pooling_usage(result: Embeddings) -> dict[str, int]:
    return {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens}


def _score_body(model: str, result: Embeddings, sampling: Sampling, layout: ScoreLayout) -> dict:
    """vLLM's ``ScoreResponse``: a list of ``{"index", "object": "score", "score"}``."""
    return {
        "id": f"score-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": [
            {"index": index, "object": "score", "score": score}
            for index, score in enumerate(pair_scores(result, layout))
        ],
        "usage": {**_pooling_usage(result), "completion_tokens": 0},
    }


def _rerank_body(model: str, result: Embeddings, sampling: Sampling, layout: ScoreLayout) -> dict:
    """vLLM's ``RerankResponse``: the documents, most relevant first (``top_n`` of them)."""
    scores = pair_scores(result, layout)
    ranked = sorted(range(len(scores)), key=lambda i: -scores[i])
    if layout.top_n:
        ranked = ranked[: layout.top_n]
    return {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": model,
        "usage": _pooling_usage(result),
        "results": [
            {"index": i, "document": {"text": layout.documents[i]}, "relevance_score": scores[i]}
            for i in ranked
        ],
    }


# The output body of each endpoint (core/endpoints.py), by its url.
BODIES = {
    CHAT_URL: _chat_body,
    COMPLETIONS_URL: _text_completion_body,
    RESPONSES_URL: _response_body,
    EMBEDDINGS_URL: _embedding_body,
    SCORE_URL: _score_body,
    RERANK_URL: _rerank_body,
}
# The type of OpenAI's error object, by the status of the failure.
ERROR_TYPES = {400: "invalid_request_error", 408: "timeout_error", 500: "server_error"}


def success_line(
    custom_id: str,
    model: str,
    completion: Completion | Embeddings,
    url: str = CHAT_URL,
    sampling: Sampling | None = None,
    call: ToolCall | ScoreLayout | None = None,
) -> dict[str, Any]:
    """The output line of a request that ran; the body follows the endpoint's schema.

    Args:
        custom_id: the request's id.
        model: the model name the body names.
        completion: what the engine produced.
        url: the endpoint the request named.
        sampling: the settings it ran with (``GeneratedRequest.sampling``), which a Responses
            body echoes.
        call: the tool call a chat request forced, or how a score or rerank request's
            vectors pair up.
    """
    line_id, request_id = _ids()
    make = BODIES[url]
    body = (
        make(model, completion, sampling or {}, call)
        if call
        else make(model, completion, sampling or {})
    )
    line: dict[str, Any] = {
        "id": line_id,
        "custom_id": custom_id,
        "response": {
            "status_code": 200,
            "request_id": request_id,
            "body": body,
        },
        "error": None,
    }
    if completion.latency_ms is not None:
        line["latency_ms"] = completion.latency_ms  # the writer appends the chain after it
    return line


def error_line(
    custom_id: str,
    code: str,
    message: str,
    status_code: int = 400,
    *,
    line: int | None = None,
    param: str | None = None,
) -> dict[str, Any]:
    """The output line of a request that did not run.

    As vLLM's ``run_batch`` writes it: ``response.body`` null and the failure in ``error``,
    with the fields of OpenAI's error object (``code``, ``message``, ``param``, ``type``)
    and of its batch error (``line``). OpenAI itself puts an HTTP failure's error object in
    ``response.body.error``; vLLM's output model allows only a response body there.

    Args:
        custom_id: the request's id (``line-N`` where the line had none).
        code: a machine-readable class, e.g. ``invalid_request`` or ``engine_error``.
        message: what went wrong, for a person.
        status_code: the HTTP-style status (400 for bad input, 500 for engine faults).
        line: the input line, where the failure is the line's own.
        param: the body field at fault, where there is one.
    """
    line_id, request_id = _ids()
    error_type = ERROR_TYPES.get(status_code, "server_error" if status_code >= 500 else None)
    return {
        "id": line_id,
        "custom_id": custom_id,
        "response": {"status_code": status_code, "request_id": request_id, "body": None},
        "error": {
            "code": code,
            "message": message,
            "param": param,
            "type": error_type or "invalid_request_error",
            "line": line,
        },
    }


def answer_text(line: dict[str, Any]) -> str | None:
    """The (first) answer of an output line of any endpoint (None for a failure); an
    embeddings result has no text: it says how many vectors it holds."""
    body = (line.get("response") or {}).get("body") or {}
    if body.get("object") == "list":
        count = len(body.get("data") or ())
        return f"({count} vector{'s' if count != 1 else ''})"
    if body.get("object") == "response":
        parts = [c for item in body.get("output") or [] for c in item.get("content") or []]
        return "".join(p.get("text", "") for p in parts) if parts else None
    choice = (body.get("choices") or [{}])[0]
    if "text" in choice:
        return choice["text"]
    message = choice.get("message") or {}
    if message.get("content") is None and message.get("tool_calls"):
        # A tool call's answer is its arguments (the store reads the first call alike).
        return message["tool_calls"][0]["function"]["arguments"]
    return message.get("content")


def token_usage(line: dict[str, Any]) -> tuple[int, int] | None:
    """``(prompt, completion)`` tokens of a success line of any endpoint."""
    usage = ((line.get("response") or {}).get("body") or {}).get("usage")
    if not usage:
        return None
    if "input_tokens" in usage:
        return usage["input_tokens"], usage["output_tokens"]
    return usage["prompt_tokens"], usage.get("completion_tokens", 0)  # none for embeddings


def answer_lengths(line: dict[str, Any]) -> list[tuple[int, bool]]:
    """``(tokens, truncated)`` of each answer of a success line of any endpoint; ``usage``
    counts the ``n`` answers of a request together, so each gets an equal share."""
    usage = token_usage(line)
    if usage is None:
        return []
    body = line["response"]["body"]
    if body.get("object") == "list" or "results" in body:  # vectors and scores: no text
        return []
    if body.get("object") == "response":
        return [(usage[1], body.get("status") == "incomplete")]
    choices = body.get("choices") or [{}]
    share = usage[1] // len(choices)
    return [(share, choice.get("finish_reason") == "length") for choice in choices]


def error_text(line: dict[str, Any]) -> str | None:
    error = line.get("error")
    if not error:
        return None
    return error.get("message") if isinstance(error, dict) else str(error)
