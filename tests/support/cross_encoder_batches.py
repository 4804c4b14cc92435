"""What the tests split from tests/unit/test_cross_encoder.py by kind share (docs/tests.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.endpoints import RERANK_URL, SCORE_URL

QUERY = "How do I get a refund?"


DOCS = [
    "Refunds are paid to the card you used within five days.",
    "Our office is closed on public holidays.",
    "To return an item, print the label and send it back for a refund.",
]


LONG = "word " * 60  # with the query, past the 64 tokens the tiny reranker reads


def _line(custom_id: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url,
            "body": {"model": "reranker", **body}}  # fmt: skip


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


RUNS = [
    _line("rerank", RERANK_URL, {"query": QUERY, "documents": DOCS}),
    _line("rerank-top", RERANK_URL, {"query": QUERY, "documents": DOCS, "top_n": 2}),
    _line("score-1n", SCORE_URL, {"queries": QUERY, "documents": DOCS}),
    _line("score-nn", SCORE_URL, {"queries": [QUERY, "opening hours"], "documents": DOCS[:2]}),
]
