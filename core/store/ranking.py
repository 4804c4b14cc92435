"""How well rerank results rank the documents, where the lines carry relevance labels.

A ``/v1/rerank`` line may carry ``metadata.relevance``: one label per document, in the
order of ``documents`` (a number, 0 for not relevant; graded labels such as 0-3 are
welcome). Each such query gets NDCG@k (the gain of a document of label ``l`` is
``2**l - 1``, discounted by ``log2(rank + 1)``, over the best order's) and its reciprocal
rank (1 / the rank of the first document labelled above 0; 0 when none is ranked). A query
whose labels do not fit (another count than its documents, not numbers) or that has no
relevant document is not graded, and counted apart with the reason.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from core.check.scoring import LABELS
from core.store.db import Store


def ndcg_at_k(order: list[int], labels: list[float], k: int) -> float:
    """NDCG@k of ``order`` (document indexes, best first; documents left out of it gain
    nothing) against ``labels`` (one per document). Needs a label above 0."""
    gains = [2.0 ** labels[i] - 1 for i in order[:k]]
    dcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(gains))
    ideal = sorted((2.0**label - 1 for label in labels), reverse=True)[:k]
    return dcg / sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))


def reciprocal_rank(order: list[int], labels: list[float]) -> float:
    """1 / the rank of the first relevant document in ``order`` (0 when none is in it)."""
    return next((1.0 / (rank + 1) for rank, i in enumerate(order) if labels[i] > 0), 0.0)


def ranked_documents(raw: dict[str, Any], metadata: Any = None) -> pd.DataFrame | None:
    """A rerank output line's documents as ranked: rank, index, score, text and, where the
    metadata labels them, each one's label (None for a line that is not a rerank)."""
    body = ((raw or {}).get("response") or {}).get("body") or {}
    results = body.get("results")
    if not isinstance(results, list):
        return None
    frame = pd.DataFrame(
        {
            "rank": range(1, len(results) + 1),
            "document": [r.get("index") for r in results],
            "score": [r.get("relevance_score") for r in results],
            "text": [(r.get("document") or {}).get("text") for r in results],
        }
    )
    labels = _labels(metadata)
    if isinstance(labels, list):
        frame["label"] = [labels[i] if i < len(labels) else None for i in frame["document"]]
    return frame


def _labels(metadata: Any) -> list[float] | str | None:
    """The labels of a line's metadata, the reason they cannot be read, or None."""
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    if not isinstance(metadata, dict) or LABELS not in metadata:
        return None
    labels = metadata[LABELS]
    if not isinstance(labels, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in labels
    ):
        return f"metadata.{LABELS} must be a list of numbers of at least 0, one per document"
    return [float(v) for v in labels]


@dataclass
class RankingQuality:
    """The graded queries of some jobs, and why the others were not graded."""

    k: int
    queries: pd.DataFrame  # job_id, custom_id, query, documents, ndcg, reciprocal_rank
    not_graded: dict[str, int] = field(default_factory=dict)  # reason -> queries

    def overall(self) -> pd.DataFrame:
        """Per job and over all: queries, mean NDCG@k and MRR with their spread (standard
        deviation, least and most)."""
        rows = []
        groups = [(job, part) for job, part in self.queries.groupby("job_id", sort=False)]
        if len(groups) > 1:
            groups.append(("all jobs", self.queries))
        for job, part in groups:
            row: dict[str, Any] = {"job_id": job, "queries": len(part)}
            for name, column in ((f"NDCG@{self.k}", "ndcg"), ("MRR", "reciprocal_rank")):
                values = part[column].to_numpy()
                row[name] = float(values.mean())
                row[f"{name} sd"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
                row[f"{name} min"], row[f"{name} max"] = float(values.min()), float(values.max())
            rows.append(row)
        return pd.DataFrame(rows)


def ranking_quality(store: Store, job_ids: list[str], k: int = 10) -> RankingQuality | None:
    """NDCG@k and reciprocal rank of every labelled rerank result of the jobs (None when
    no rerank result of theirs carries labels)."""
    sql = """
        SELECT r.job_id, r.custom_id, q.prompt AS query,
               CAST(r.raw->'$.response.body.results' AS VARCHAR) AS results,
               CAST(q.metadata AS VARCHAR) AS metadata
        FROM results r JOIN requests q USING (job_id, custom_id)
        WHERE list_contains(?, r.job_id) AND r.status = 'succeeded'
          AND json_type(r.raw, '$.response.body.results') = 'ARRAY'
          AND (q.metadata->'$.relevance') IS NOT NULL
        ORDER BY r.job_id, q.line_no
    """
    with store.cursor() as cur:
        rows = cur.execute(sql, [job_ids]).fetchall()
    if not rows:
        return None
    graded, skipped = [], {}
    for job_id, custom_id, query, results, metadata in rows:
        labels = _labels(metadata)
        order = [r["index"] for r in json.loads(results)]
        reason = labels if isinstance(labels, str) else None
        if reason is None and (len(labels) <= max(order, default=-1) or not labels):
            reason = f"metadata.{LABELS} has fewer labels than the line has documents"
        if reason is None and max(labels) <= 0:
            reason = "no document is labelled relevant (above 0)"
        if reason is not None:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        graded.append(
            {
                "job_id": job_id,
                "custom_id": custom_id,
                "query": query,
                "documents": len(labels),
                "ndcg": ndcg_at_k(order, labels, k),
                "reciprocal_rank": reciprocal_rank(order, labels),
            }
        )
    columns = ["job_id", "custom_id", "query", "documents", "ndcg", "reciprocal_rank"]
    frame = pd.DataFrame(graded, columns=columns).astype({"ndcg": np.float64})
    return RankingQuality(k, frame, skipped)
