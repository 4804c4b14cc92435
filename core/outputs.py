"""Output lines in the format OpenAI's Batch API and vLLM's ``run_batch`` write.

A line is ``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}``;
a success carries a ``chat.completion`` body, a failure ``body: null`` and an ``error``
object ``{"code", "message"}``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Choice:
    """One generated answer (a request with ``n`` > 1 has several)."""

    text: str
    finish_reason: str | None
    completion_tokens: int
    stop_reason: int | str | None = None
    logprobs: list[dict[str, Any]] | None = None


@dataclass
class Completion:
    """What the engine produced for one request, free of vLLM types."""

    prompt_tokens: int
    choices: list[Choice] = field(default_factory=list)
    cached_tokens: int = 0


def _ids() -> tuple[str, str]:
    return f"batch_req_{uuid.uuid4().hex}", f"req_{uuid.uuid4().hex}"


def success_line(custom_id: str, model: str, completion: Completion) -> dict[str, Any]:
    """The output line of a request that ran."""
    line_id, request_id = _ids()
    completion_tokens = sum(c.completion_tokens for c in completion.choices)
    body = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": index,
                "message": {"role": "assistant", "content": choice.text},
                "logprobs": {"content": choice.logprobs} if choice.logprobs is not None else None,
                "finish_reason": choice.finish_reason,
                "stop_reason": choice.stop_reason,
            }
            for index, choice in enumerate(completion.choices)
        ],
        "usage": {
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": completion.prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": completion.cached_tokens},
        },
    }
    return {
        "id": line_id,
        "custom_id": custom_id,
        "response": {"status_code": 200, "request_id": request_id, "body": body},
        "error": None,
    }


def error_line(custom_id: str, code: str, message: str, status_code: int = 400) -> dict[str, Any]:
    """The output line of a request that did not run.

    Args:
        custom_id: the request's id (``line-N`` where the line had none).
        code: a machine-readable class, e.g. ``invalid_request`` or ``engine_error``.
        message: what went wrong, for a person.
        status_code: the HTTP-style status (400 for bad input, 500 for engine faults).
    """
    line_id, request_id = _ids()
    return {
        "id": line_id,
        "custom_id": custom_id,
        "response": {"status_code": status_code, "request_id": request_id, "body": None},
        "error": {"code": code, "message": message},
    }


def answer_text(line: dict[str, Any]) -> str | None:
    """The first choice's answer of an output line (None for a failure)."""
    body = (line.get("response") or {}).get("body") or {}
    choices = body.get("choices") or [{}]
    return (choices[0].get("message") or {}).get("content")


def error_text(line: dict[str, Any]) -> str | None:
    error = line.get("error")
    if not error:
        return None
    return error.get("message") if isinstance(error, dict) else str(error)
