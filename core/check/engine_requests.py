"""The engine requests a batch line becomes: one typed request per kind of endpoint.

As vLLM's ``BatchRequestInput`` picks the model of its ``body`` by the line's ``url``, a
line becomes the kind its url names (:data:`KINDS`): a :class:`ChatRequest`
(``/v1/chat/completions`` and ``/v1/responses``: a conversation), a
:class:`CompletionRequest` (``/v1/completions``: a raw prompt), an
:class:`EmbeddingRequest` (``/v1/embeddings``: texts to vectors) or a
:class:`ScoreRequest` (``/v1/score`` and ``/v1/rerank``: pairs of texts scored). Code that
treats kinds apart asks the kind (``isinstance`` or ``match``), never which fields are set.

Each is a plain dataclass with slots, built with keywords only: the check builds one per
line of files of hundreds of thousands of lines, and a kind has no field of another. A
request crosses a process boundary only to a Ray replica, as JSON, validated back into its
kind there (``core.run.ray_cluster.request_from_dict``). This module imports no vLLM: the
engine turns requests into vLLM objects (``core.run.engine``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

from core.endpoints import (
    CHAT_URL,
    COMPLETIONS_URL,
    EMBEDDINGS_URL,
    RERANK_URL,
    RESPONSES_URL,
    SCORE_URL,
)
from core.schemas import Adapter


@dataclass(slots=True, kw_only=True)
class RequestBase:
    """What every engine request has.

    Attributes:
        custom_id: the caller's id, echoed in the output line.
        url: the endpoint the line names; the output body must follow its schema.
        model: the body's ``model`` field (the name the caller asked for), if any.
        warnings: problems worth telling the user that do not stop the request.
        defaulted: the sampling fields whose value came from the job defaults (none for
            a pooled request, which has no sampling).
        redacted: how many sensitive items of each kind the worker replaced by
            placeholders before the engine read it (:mod:`core.check.redaction`); None:
            none were.
    """

    custom_id: str
    url: str
    model: str | None = None
    warnings: list[str] = field(default_factory=list)
    defaulted: tuple[str, ...] = ()
    redacted: dict[str, int] | None = None


@dataclass(slots=True, kw_only=True)
class GeneratedRequest(RequestBase):
    """A request whose answer a chat model generates (chat, responses, completions).

    Attributes:
        sampling: keyword arguments for ``vllm.SamplingParams``.
        json_schema: a JSON schema (or ``{}`` for any JSON object) the answer must follow.
        adapter: the LoRA adapter it runs with on its base's engine (set by the worker from
            the job's ``adapters``; None: the model itself).
    """

    sampling: dict[str, Any]
    json_schema: dict[str, Any] | None = None
    adapter: Adapter | None = None

    @property
    def max_tokens(self) -> int:
        """The longest an answer may be (the job default applies where the body sets none)."""
        return int(self.sampling.get("max_tokens") or 0)


@dataclass(slots=True, kw_only=True)
class ChatRequest(GeneratedRequest):
    """A conversation run through the model's chat template: a ``/v1/chat/completions``
    line, or a ``/v1/responses`` one (its ``instructions`` and ``input`` as messages).

    Attributes:
        messages: the conversation, each message ``{"role", "content"}`` with text content.
        tools: the tools a chat template renders for a ``tool_choice`` of ``auto``.
        tool_choice, tool_name: a tool call (:mod:`core.check.tools`): ``required``, a
            named ``function``, or ``auto``; None for an answer in text.
    """

    url: str = CHAT_URL
    messages: list[dict[str, str]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | None = None
    tool_name: str | None = None


@dataclass(slots=True, kw_only=True)
class CompletionRequest(GeneratedRequest):
    """A ``/v1/completions`` line: a raw prompt, run without a chat template.

    Attributes:
        prompt: the prompt as the body gives it.
    """

    url: str = COMPLETIONS_URL
    prompt: str


@dataclass(slots=True, kw_only=True)
class PooledRequest(RequestBase):
    """A request run on an embedding model (or a cross-encoder): vectors or scores, no
    text, no sampling.

    Attributes:
        inputs: the texts (or, for embeddings, lists of token ids) the model reads, one
            engine request each (one per pair on a cross-encoder).
    """

    inputs: list[str | list[int]]


@dataclass(slots=True, kw_only=True)
class EmbeddingRequest(PooledRequest):
    """A ``/v1/embeddings`` line: one vector per input.

    Attributes:
        encoding_format: how its vectors are written: ``float`` lists or ``base64``.
        dimensions: the vector size the body asks for (checked against the model).
    """

    url: str = EMBEDDINGS_URL
    encoding_format: str = "float"
    dimensions: int | None = None

    def input_field(self, index: int) -> str:
        """The body field that holds input ``index`` (for messages)."""
        return f"body.input[{index}]"


@dataclass(slots=True, kw_only=True)
class ScoreRequest(PooledRequest):
    """A ``/v1/score`` or ``/v1/rerank`` line (:mod:`core.check.scoring`): ``inputs`` are
    the first texts (the queries, or the one query) and then the documents.

    Attributes:
        queries: how many of ``inputs`` are first texts; one is paired with each document,
            or as many as there are documents pair one to one.
        texts_from: the body's two fields the texts came from (e.g. ``query``,
            ``documents``), for messages.
        top_n: rerank: how many of the ranked documents to write (0: all).
    """

    url: str = SCORE_URL
    queries: int
    texts_from: tuple[str, str]
    top_n: int = 0

    @property
    def documents(self) -> list[str]:
        """The second texts, which a rerank result echoes."""
        return [str(t) for t in self.inputs[self.queries :]]

    def input_field(self, index: int) -> str:
        """The body field that holds input ``index``: a query or a document (for messages)."""
        first, second = self.texts_from
        if index < self.queries:
            return f"body.{first}" if first == "query" else f"body.{first}[{index}]"
        return f"body.{second}[{index - self.queries}]"


EngineRequest: TypeAlias = ChatRequest | CompletionRequest | EmbeddingRequest | ScoreRequest

# The kind of request each endpoint's lines become (core/endpoints.py), by url.
KINDS: dict[str, type[EngineRequest]] = {
    CHAT_URL: ChatRequest,
    COMPLETIONS_URL: CompletionRequest,
    RESPONSES_URL: ChatRequest,
    EMBEDDINGS_URL: EmbeddingRequest,
    SCORE_URL: ScoreRequest,
    RERANK_URL: ScoreRequest,
}
