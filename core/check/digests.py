"""The digest of a request without its engine: what the check's own pass (every process of
it) keeps of each deterministic line, so that the reuse forecast keys a file's lines for any
engine settings without reading the file again (:class:`core.reuse.keys.RequestKeys`)."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from functools import cache
from math import copysign
from typing import Any

import msgspec

from core.check.engine_requests import ChatRequest, EngineRequest, GeneratedRequest

DIGEST_BYTES = 16  # BLAKE2b-128: a collision among a billion answers has odds of 1e-21

# Fields of a request that say nothing about its answer: its id, the name its body asked
# for (the folder it resolves to is in the engine's identity), the check's notes, and the
# count of what redaction replaced (its texts, placeholders in, are in the key).
_NOT_IN_KEY = frozenset({"custom_id", "model", "warnings", "defaulted", "redacted"})
_ENCODER = msgspec.json.Encoder(order="sorted")
_encode = _ENCODER.encode
encode_sorted = _encode  # the encoding a digest hashes (keys sorted at every depth)
encode_sorted_into = _ENCODER.encode_into  # the same, into a buffer kept (no bytes made)


def deterministic(request: EngineRequest) -> bool:
    """Whether the engine gives this request the same answer each time: vectors and scores
    always; generated text at temperature 0 (greedy) or with a ``seed``. A request sampled
    without a seed is a new sample each time, as its author meant: never reused."""
    if not isinstance(request, GeneratedRequest):
        return True
    sampling = request.sampling
    return sampling.get("seed") is not None or sampling.get("temperature") == 0


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


@cache
def _key_fields(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(kind) if f.name not in _NOT_IN_KEY)


def request_digest(request: EngineRequest) -> bytes:
    """A hash of the request with its defaults applied (its kind's fields, keys sorted at
    every depth), leaving out what names it but does not decide its answer."""
    fields = {name: getattr(request, name) for name in _key_fields(type(request))}
    try:
        return digest(_encode(fields))
    except TypeError:  # a dict keyed by numbers (logit_bias by token id): sorted as text
        return digest(_encode(_text_keys(fields)))


def _text_keys(value: Any) -> Any:
    """``value`` with every dict key made text, at every depth."""
    if isinstance(value, dict):
        return {str(k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_text_keys(v) for v in value]
    return value


def _chat_pieces() -> tuple[bytes, bytes, bytes]:
    """What a fast-path chat line's request encodes to around its messages and sampling: it
    sets only those, the rest of its fields keep their defaults (tests/unit/test_reuse.py
    holds the digests of both paths equal)."""
    blank = ChatRequest(custom_id="", sampling={}, messages=[])
    rest = {name: getattr(blank, name) for name in _key_fields(ChatRequest)}
    encoded = _encode({**rest, "messages": 0, "sampling": 1})
    before, after = encoded.split(b'"messages":0')
    between, after = after.split(b'"sampling":1')
    return before + b'"messages":', between + b'"sampling":', after


_BEFORE, _BETWEEN, _AFTER = _chat_pieces()
# The hash of what precedes the messages, copied for each line rather than hashed again.
HASHED_BEFORE = hashlib.blake2b(_BEFORE, digest_size=DIGEST_BYTES)
# What follows a line's messages, by its sampling: a file has few kinds (a seed per line
# fills it, then each such line encodes its own). The sign of the temperature is in the
# key: -0.0 == 0.0, but the two encode apart (as the request's own digest keeps them).
_TAILS: dict[tuple, bytes] = {}
_MAX_TAILS = 4096


def chat_tail(max_tokens: int, temperature: float, top_p: float, seed: Any, n: Any) -> bytes:
    """What follows a fast-path chat line's messages in its request's encoding, by its
    sampling (cached: a file has few kinds)."""
    shape = (max_tokens, temperature, top_p, seed, n, copysign(1.0, temperature))
    tail = _TAILS.get(shape)
    if tail is None:
        sampling = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p}
        if seed is not None:
            sampling["seed"] = seed
        if n is not None:
            sampling["n"] = n
        tail = _BETWEEN + _encode(sampling) + _AFTER
        if len(_TAILS) < _MAX_TAILS:
            _TAILS[shape] = tail
    return tail


def fast_chat_digest(
    messages: Any, max_tokens: int, temperature: float, top_p: float, seed: Any, n: Any
) -> bytes:
    """:func:`request_digest` of a fast-path chat line's request (its messages as decoded
    structs: they encode as the request's dicts do; its numbers typed as the fast path's
    decoder and :class:`~core.schemas.JobDefaults` type them), without building the request:
    the hash of the encoded messages and a tail looked up. The check's hot loop
    (:meth:`core.check.scanner.Scanner.batches`) does the same inline."""
    hasher = HASHED_BEFORE.copy()
    hasher.update(_encode(messages))
    hasher.update(chat_tail(max_tokens, temperature, top_p, seed, n))
    return hasher.digest()


@dataclass
class RequestDigests:
    """The digests of a file's valid deterministic lines, by what picks their model folder:
    the body's ``model`` and whether it makes vectors or scores (a pooled request runs on
    the embedding model). 16 bytes a line, in file order within each group."""

    groups: dict[tuple[str, bool], bytearray] = field(default_factory=dict)

    def add(self, model: str | None, pooled: bool, line_digest: bytes) -> None:
        self.group(model, pooled).extend(line_digest)

    def group(self, model: str | None, pooled: bool) -> bytearray:
        """The digests of one group, to extend in place (the check's hot loop keeps it)."""
        group = self.groups.get((model or "", pooled))
        if group is None:
            group = self.groups[model or "", pooled] = bytearray()
        return group

    def merge(self, other: RequestDigests) -> None:
        """Adds those of a later part of the file."""
        for group, digests in other.groups.items():
            self.groups.setdefault(group, bytearray()).extend(digests)

    def __len__(self) -> int:
        return sum(len(digests) for digests in self.groups.values()) // DIGEST_BYTES
