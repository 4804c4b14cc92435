"""The fast path for the common chat line: decoded straight into typed structs, validated
in C by msgspec (measured: 1.6M lines/s to decode, against 273k through pydantic).

A chat line of the usual shape decodes straight into these structs, validated in C. Any
line outside that shape (another url, text parts, an unknown or rarer field, a value out
of range) fails to decode here and takes the generic path (:mod:`core.check.requests`),
which names the problem.
tests/unit/test_requests.py checks that both paths build the same request.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from core.check.engine_requests import ChatRequest
from core.endpoints import CHAT_URL
from core.schemas import SAMPLING_BOUNDS, JobDefaults


def _bounded(kind: type, field: str) -> object:
    return Annotated[kind, msgspec.Meta(**SAMPLING_BOUNDS[field].constraints())]


_MaxTokens = _bounded(int, "max_tokens")
_NULL = msgspec.Raw(b"null")


class _FastMessage(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    role: Literal["system", "developer", "user", "assistant"]
    content: str


class _FastChatBody(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    model: Annotated[str, msgspec.Meta(min_length=1)]
    messages: Annotated[tuple[_FastMessage, ...], msgspec.Meta(min_length=1)]
    max_completion_tokens: _MaxTokens | None = None
    max_tokens: _MaxTokens | None = None
    temperature: _bounded(float, "temperature") | None = None
    top_p: _bounded(float, "top_p") | None = None
    seed: _bounded(int, "seed") | None = None
    n: _bounded(int, "n") | None = None
    # Passive fields are kept undecoded (much faster); the caller checks the line's UTF-8.
    metadata: msgspec.Raw = _NULL
    user: msgspec.Raw = _NULL
    store: msgspec.Raw = _NULL
    service_tier: msgspec.Raw = _NULL
    stream: Literal[False] | None = None


class FastChatLine(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A chat line of the common shape, as decoded by :func:`decode_fast_chat_line`."""

    custom_id: str
    method: Literal["POST"]
    url: Literal["/v1/chat/completions"]  # core.endpoints.CHAT: the one fast_path endpoint
    body: _FastChatBody


FAST_DECODER = msgspec.json.Decoder(FastChatLine)
# A line the fast path cannot take (RecursionError: nested too deep for the decoder) goes to
# the generic path, which says why.
FAST_DECODE_ERRORS = (
    msgspec.DecodeError,
    msgspec.ValidationError,
    UnicodeDecodeError,
    RecursionError,
)


def decode_fast_chat_line(raw: bytes) -> FastChatLine | None:
    """Decodes a line of the common chat shape, or returns None (use the generic path)."""
    try:
        line = FAST_DECODER.decode(raw)
    except FAST_DECODE_ERRORS:
        return None
    return line if raw.isascii() or is_utf8(raw) else None


def is_utf8(raw: bytes) -> bool:
    """True when ``raw`` is valid UTF-8."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def plain_turns(roles: tuple[str, ...]) -> tuple[str, ...] | None:
    """``roles`` (one shared tuple per sequence) when the generic path would accept the
    conversation without a word to say, else None. Cached: files repeat a few sequences."""
    if roles in PLAIN_TURNS:
        return PLAIN_TURNS[roles]
    PLAIN_TURNS[roles] = roles if _plain_turns(roles) else None
    return PLAIN_TURNS[roles]


def fast_chat_roles(line: FastChatLine) -> tuple[str, ...] | None:
    """The roles of a fast-decoded line whose turns and id need no word, else None."""
    roles = plain_turns(tuple([m.role for m in line.body.messages]))
    cid = line.custom_id
    if roles is None or not cid or (cid[0].isspace() and not cid.strip()):
        return None
    return roles


def fast_chat_settings(
    body: _FastChatBody, defaults: JobDefaults
) -> tuple[int, float, float, tuple[str, ...]]:
    """``max_tokens``, ``temperature``, ``top_p`` as they will run, and which were defaulted."""
    max_tokens = body.max_completion_tokens or body.max_tokens
    temperature = body.temperature
    top_p = body.top_p
    return (
        defaults.max_tokens if max_tokens is None else max_tokens,
        defaults.temperature if temperature is None else temperature,
        defaults.top_p if top_p is None else top_p,
        DEFAULTED[max_tokens is None, temperature is None, top_p is None],
    )


def _plain_turns(roles: tuple[str, ...]) -> bool:
    """True for a conversation the generic path accepts without a word to say."""
    if "user" not in roles or roles[-1] == "assistant":
        return False
    started = False
    for role in roles:
        if role == "user" or role == "assistant":
            started = True
        elif started:
            return False  # instructions after the first turn: the generic path warns
    return True


PLAIN_TURNS: dict[tuple[str, ...], tuple[str, ...] | None] = {}
# Which sampling fields came from the defaults, by (max_tokens, temperature, top_p) missing.
DEFAULTED = {
    (mt, t, p): tuple(
        name
        for name, missing in zip(("max_tokens", "temperature", "top_p"), (mt, t, p), strict=True)
        if missing
    )
    for mt in (False, True)
    for t in (False, True)
    for p in (False, True)
}


def fast_chat_request(line: FastChatLine, defaults: JobDefaults) -> ChatRequest | None:
    """The request for a fast-decoded line, or None where the generic path must judge it."""
    if fast_chat_roles(line) is None:
        return None
    body = line.body
    max_tokens, temperature, top_p, defaulted = fast_chat_settings(body, defaults)
    sampling: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
    }
    if body.seed is not None:
        sampling["seed"] = body.seed
    if body.n is not None:
        sampling["n"] = body.n
    return ChatRequest(
        custom_id=line.custom_id,
        url=CHAT_URL,
        model=body.model,
        warnings=[],
        defaulted=defaulted,
        sampling=sampling,
        messages=[{"role": m.role, "content": m.content} for m in body.messages],
    )
