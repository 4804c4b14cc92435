"""Sensitive data replaced in a request before the engine reads it (the ``redact`` policy of
:mod:`core.check.sensitive`).

The worker redacts each request of a job submitted under that policy as it reads the job's
input (its file on disk stays as given): every text the model reads (chat message contents,
a completion's prompt, embedding and score inputs) has each e-mail address, phone number,
card number, IBAN, IP address and credential replaced by a placeholder such as
``[EMAIL_1]``, numbered per request. The request keeps how many items of each kind it had
(``redacted``), which its output line repeats; the items themselves are returned to the
caller, who keeps them only where the job's owner asked (``keep_redactions``).
"""

from __future__ import annotations

from typing import Any

from core.check.engine_requests import (
    ChatRequest,
    CompletionRequest,
    EngineRequest,
    PooledRequest,
)
from core.check.sensitive import redact

Item = tuple[str, str, str]  # (placeholder, kind, value)


def redact_request(request: EngineRequest, region: str) -> list[Item]:
    """Replaces the sensitive items in ``request``'s texts by placeholders, in place (phone
    numbers without a country code read as ``region``'s), and records their count by kind
    on ``request.redacted``; returns the items replaced (none: the request is left as it
    was)."""
    texts = _texts(request)
    replaced, items = redact(texts, region)
    if not items:
        return []
    _put(request, replaced)
    counts: dict[str, int] = {}
    for _, kind, _ in items:
        counts[kind] = counts.get(kind, 0) + 1
    request.redacted = counts
    return items


def _texts(request: EngineRequest) -> list[str]:
    """The request's texts the model reads, in a fixed order (:func:`_put` writes them back)."""
    if isinstance(request, ChatRequest):
        return [text for message in request.messages for text in _content_texts(message)]
    if isinstance(request, CompletionRequest):
        return [request.prompt]
    if isinstance(request, PooledRequest):
        return [text for text in request.inputs if isinstance(text, str)]
    return []


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("text"), str)


def _content_texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [part["text"] for part in content if _is_text_part(part)]
    return []


def _put(request: EngineRequest, texts: list[str]) -> None:
    """Writes ``texts`` back where :func:`_texts` read them (new message dicts: a request's
    messages may be shared with what parsed them)."""
    given = iter(texts)
    if isinstance(request, ChatRequest):
        request.messages = [_put_content(message, given) for message in request.messages]
    elif isinstance(request, CompletionRequest):
        request.prompt = next(given)
    elif isinstance(request, PooledRequest):
        request.inputs = [next(given) if isinstance(x, str) else x for x in request.inputs]


def _put_content(message: dict[str, Any], given: Any) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": next(given)}
    if isinstance(content, list):
        parts = [{**p, "text": next(given)} if _is_text_part(p) else p for p in content]
        return {**message, "content": parts}
    return message
