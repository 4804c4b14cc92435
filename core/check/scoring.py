"""``/v1/score`` and ``/v1/rerank`` bodies, in vLLM's request shapes.

A score body pairs texts: ``queries`` with ``documents`` (or ``items``), or the older
``data_1``/``data_2`` and ``text_1``/``text_2``, each a string or a list of strings, one
to one, one to many or many to many (vLLM's rule). A rerank body is one ``query`` and its
``documents``, with ``top_n`` (0: all). Both run on a cross-encoder where ``model`` maps to
one (it reads each pair together and scores it; each pair must fit the model), else on an
embedding model as a bi-encoder: each text is embedded alone and a pair's score is the
cosine of its two vectors, so each text must fit the model (checked with the model, as
embeddings inputs are: :mod:`core.check.model_fit`). Image and other multi-modal parts are
refused: the built-in models read text only.
"""

from __future__ import annotations

from typing import Any

from core.check.sampling import RequestError, integer

MAX_DOCUMENTS = 1_000  # documents (second texts) of one line: a line is one request
LABELS = "relevance"  # a rerank line's metadata field: one relevance label per document
SCORE_PAIRS = (
    ("queries", "documents"),
    ("queries", "items"),
    ("data_1", "data_2"),
    ("text_1", "text_2"),
)
# vLLM's fields that change how a pair is read (cut, templated, padded); no such knob is
# served: each text, or pair, is read whole, and one too long is refused by the check.
CROSS_ENCODER_FIELDS = (
    "truncate_prompt_tokens",
    "max_tokens_per_query",
    "max_tokens_per_doc",
    "instruction",
    "chat_template_kwargs",
    "use_activation",
    "padding",
    "truncation_side",
)
PASSIVE = {"model", "user", "metadata", "request_id", "priority"}


def _texts(body: dict[str, Any], name: str, limit: int | None = None) -> list[str]:
    value = body.get(name)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise RequestError(f"body.{name} must be a string or a non-empty list of strings")
    for index, text in enumerate(value):
        if isinstance(text, dict):
            raise RequestError(
                f"body.{name}[{index}] is a multi-modal input; the model reads text only"
            )
        if not isinstance(text, str) or not text:
            raise RequestError(f"body.{name}[{index}] must be a non-empty string")
    if limit is not None and len(value) > limit:
        raise RequestError(
            f"body.{name} has {len(value):,} texts; at most {limit:,} per line: split the "
            "documents over several lines"
        )
    return value


def _refuse_cross_encoder_fields(body: dict[str, Any]) -> list[str]:
    """Errors for set cross-encoder knobs; warnings for fields nobody reads."""
    for name in CROSS_ENCODER_FIELDS:
        if body.get(name) not in (None, 0):
            raise RequestError(
                f"body.{name} is not supported: each text (each pair, on a cross-encoder) "
                "is read whole, as written; leave it out"
            )
    known = PASSIVE | set(CROSS_ENCODER_FIELDS) | {n for pair in SCORE_PAIRS for n in pair}
    known |= {"query", "top_n"}
    return [
        f"body.{name} is not a field of a score or rerank request; it is ignored"
        for name in sorted(set(body) - known)
    ]


def score_texts(
    body: dict[str, Any],
) -> tuple[tuple[str, str], list[str], list[str], list[str]]:
    """A score body's two fields (e.g. ``queries``, ``documents``), first texts, second
    texts, and warnings.

    Raises:
        RequestError: no pair of fields, empty or non-text inputs, too many documents, or
            lengths that are not 1:1, 1:N or N:N.
    """
    warnings = _refuse_cross_encoder_fields(body)
    pair = next((p for p in SCORE_PAIRS if p[0] in body and p[1] in body), None)
    pair = pair or next((p for p in SCORE_PAIRS if p[0] in body or p[1] in body), None)
    if pair is None:
        raise RequestError(
            "body.queries and body.documents are missing; a score line pairs queries with "
            "documents (or data_1 with data_2, or text_1 with text_2)"
        )
    first = _texts(body, pair[0])
    second = _texts(body, pair[1], MAX_DOCUMENTS)
    if len(first) != 1 and len(first) != len(second):
        raise RequestError(
            f"body.{pair[0]} has {len(first)} texts and body.{pair[1]} {len(second)}: pair "
            "one with many, or as many with as many"
        )
    return pair, first, second, warnings


def rerank_texts(body: dict[str, Any]) -> tuple[str, list[str], int, list[str]]:
    """A rerank body's query, documents, ``top_n`` (0: all) and warnings.

    Raises:
        RequestError: no query, empty or non-text documents, too many of them, or a bad
            ``top_n``.
    """
    warnings = _refuse_cross_encoder_fields(body)
    query = body.get("query")
    if isinstance(query, dict):
        raise RequestError("body.query is a multi-modal input; the model reads text only")
    if not isinstance(query, str) or not query:
        raise RequestError("body.query must be a non-empty string")
    documents = _texts(body, "documents", MAX_DOCUMENTS)
    top_n = integer(body, "top_n", 0) if body.get("top_n") is not None else 0
    return query, documents, top_n, warnings


def score_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A score body's fields of :class:`core.check.engine_requests.ScoreRequest`.

    Raises:
        RequestError: as :func:`score_texts`.
    """
    fields, first, second, warnings = score_texts(body)
    return {"warnings": warnings, "inputs": [*first, *second], "queries": len(first),
            "texts_from": fields}  # fmt: skip


def rerank_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A rerank body's fields of :class:`core.check.engine_requests.ScoreRequest`.

    Raises:
        RequestError: as :func:`rerank_texts`.
    """
    query, documents, top_n, warnings = rerank_texts(body)
    return {"warnings": warnings, "inputs": [query, *documents], "queries": 1, "top_n": top_n,
            "texts_from": ("query", "documents")}  # fmt: skip
