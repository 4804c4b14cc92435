"""What the tests split from tests/unit/test_scoring.py by kind share (docs/tests.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.check.scoring import MAX_DOCUMENTS
from core.endpoints import RERANK_URL, SCORE_URL

QUERY = "How do I get a refund?"


DOCS = [
    "Refunds are paid to the card you used within five days.",
    "Our office is closed on public holidays.",
    "To return an item, print the label and send it back for a refund.",
]


VALID: dict[str, tuple[str, dict[str, Any]]] = {
    "rerank": (RERANK_URL, {"query": QUERY, "documents": DOCS}),
    "rerank-top": (RERANK_URL, {"query": QUERY, "documents": DOCS, "top_n": 2}),
    "rerank-one": (RERANK_URL, {"query": QUERY, "documents": DOCS[0]}),
    "score-1n": (SCORE_URL, {"queries": QUERY, "documents": DOCS}),
    "score-nn": (SCORE_URL, {"queries": [QUERY, "opening hours"], "documents": DOCS[:2]}),
    "score-items": (SCORE_URL, {"queries": [QUERY], "items": DOCS}),
    "score-data": (SCORE_URL, {"data_1": QUERY, "data_2": DOCS[1]}),
    "score-text": (SCORE_URL, {"text_1": [QUERY], "text_2": [DOCS[2]], "metadata": {"k": 1}}),
}


IMAGE = {"content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (SCORE_URL, {"queries": [QUERY, "b"], "documents": DOCS}, "body.queries"),  # 2:3
    (SCORE_URL, {"queries": QUERY}, "body.documents"),
    (SCORE_URL, {"documents": DOCS}, "body.queries"),
    (SCORE_URL, {"input": QUERY}, "body.queries"),
    (RERANK_URL, {"query": QUERY, "documents": ["x"] * (MAX_DOCUMENTS + 1)}, "body.documents"),
    (RERANK_URL, {"query": QUERY, "documents": []}, "body.documents"),
    (RERANK_URL, {"query": QUERY, "documents": ["a", ""]}, "body.documents"),
    (RERANK_URL, {"query": "", "documents": DOCS}, "body.query"),
    (RERANK_URL, {"query": IMAGE, "documents": DOCS}, "body.query"),
    (RERANK_URL, {"query": QUERY, "documents": [IMAGE]}, "body.documents"),
    (RERANK_URL, {"query": QUERY, "documents": DOCS, "top_n": -1}, "body.top_n"),
    (
        RERANK_URL,
        {"query": QUERY, "documents": DOCS, "truncate_prompt_tokens": 8},
        "body.truncate_prompt_tokens",
    ),
    (RERANK_URL, {"query": QUERY, "documents": ["word " * 400]}, "body.documents"),  # too long
]


def _line(custom_id: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url,
            "body": {"model": "rerank-model", **body}}  # fmt: skip


def _write(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
