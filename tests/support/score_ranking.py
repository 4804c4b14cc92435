"""What the tests split from tests/unit/test_score_ranking.py by kind share (docs/tests.md)."""

from __future__ import annotations

from typing import Any

from core.endpoints import SCORE_URL

# The query's vector first, then the documents': cosines 1, 0 and 0.89 rank 0, 2, 1.
VECTORS = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.5]]


DOCS = ["<i>a</i>", "b", "c"]


def score_row(custom_id: str, labels: list[Any], **texts: Any) -> dict[str, Any]:
    body = {"model": "m", **(texts or {"text_1": "sky?", "text_2": DOCS})}
    body["metadata"] = {"relevance": labels}
    line = {"custom_id": custom_id, "method": "POST", "url": SCORE_URL, "body": body}
    return {"custom_id": custom_id, "vectors": VECTORS, "request": line}
