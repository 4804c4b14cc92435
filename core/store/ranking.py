"""How well rerank and score results rank the documents, where the lines carry relevance
labels.

A ``/v1/rerank`` line, or a ``/v1/score`` line of one query and a list of documents (its
documents ranked by their scores), may carry ``metadata.relevance``: one label per
document, in the order of the documents (a number, 0 for not relevant; graded labels such
as 0-3 are welcome). Each such query gets NDCG@k (the gain of a document of label ``l`` is
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

from core.check.scoring import LABELS, SCORE_PAIRS
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


SEVERAL_QUERIES = (
    "a /v1/score line of several queries pairs its texts one to one: give one query and "
    "a list of documents to rank them"
)


def _score_pair(params: Any) -> tuple[Any, Any]:
    """A score request's two texts (each a string or a list), as its body names them."""
    if isinstance(params, str):
        params = json.loads(params)
    for first, second in SCORE_PAIRS:
        if isinstance(params, dict) and first in params:
            return params[first], params.get(second)
    return None, None


def ranked_results(body: dict[str, Any], params: Any = None) -> list[dict[str, Any]] | str | None:
    """A rerank body's ``results``, or a one-query score body's pairs as the same
    (``index``, ``relevance_score``, ``document``), best first; the reason a score line of
    several queries is not a ranking; None for other bodies."""
    if isinstance(body.get("results"), list):
        return body["results"]
    data = body.get("data")
    if not isinstance(data, list) or not data or data[0].get("object") != "score":
        return None
    queries, documents = _score_pair(params)
    if isinstance(queries, list) and len(queries) > 1:
        return SEVERAL_QUERIES
    texts = documents if isinstance(documents, list) else [documents]
    ranked = sorted(data, key=lambda d: -d.get("score", 0.0))
    return [
        {
            "index": d.get("index"),
            "relevance_score": d.get("score"),
            "document": {"text": texts[d["index"]] if d.get("index", -1) < len(texts) else None},
        }
        for d in ranked
    ]


def ranked_documents(
    raw: dict[str, Any], metadata: Any = None, params: Any = None
) -> pd.DataFrame | None:
    """A rerank (or one-query score) output line's documents as ranked: rank, index,
    score, text and, where the metadata labels them, each one's label (None for a line
    that ranks nothing). ``params``: the request's body, where the score line's texts are."""
    body = ((raw or {}).get("response") or {}).get("body") or {}
    results = ranked_results(body, params)
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
    """NDCG@k and reciprocal rank of every labelled rerank (or one-query score) result of
    the jobs (None when no such result of theirs carries labels)."""
    sql = """
        SELECT r.job_id, r.custom_id, q.prompt AS query,
               CAST(r.raw->'$.response.body' AS VARCHAR) AS body,
               CAST(q.metadata AS VARCHAR) AS metadata, CAST(q.params AS VARCHAR) AS params
        FROM results r JOIN requests q USING (job_id, custom_id)
        WHERE list_contains(?, r.job_id) AND r.status = 'succeeded'
          -- a ranking has no finish reason: chat answers are never parsed (1M: 10 s)
          AND r.finish_reason IS NULL
          AND (json_type(r.raw, '$.response.body.results') = 'ARRAY'
               OR (r.raw->>'$.response.body.data[0].object') = 'score')
          AND (q.metadata->'$.relevance') IS NOT NULL
        ORDER BY r.job_id, q.line_no
    """
    with store.cursor() as cur:
        rows = cur.execute(sql, [job_ids]).fetchall()
    if not rows:
        return None
    graded, skipped = [], {}
    for job_id, custom_id, query, body, metadata, params in rows:
        labels = _labels(metadata)
        results = ranked_results(json.loads(body), params)
        order = [r["index"] for r in results] if isinstance(results, list) else []
        reason = labels if isinstance(labels, str) else None
        if reason is None and isinstance(results, str):
            reason = results
        if query is None and isinstance(results, list):  # text_1 / data_1: the query's text
            first = _score_pair(params)[0]
            query = first[0] if isinstance(first, list) else first
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


def ranking_figure(quality: RankingQuality) -> Any:
    """NDCG@k and MRR per job (and over all jobs): the means as bars, the standard
    deviation over the queries as error bars, the queries counted in the hover."""
    import plotly.graph_objects as go

    overall = quality.overall()
    fig = go.Figure()
    for name in (f"NDCG@{quality.k}", "MRR"):
        fig.add_bar(
            name=name,
            x=overall["job_id"],
            y=overall[name],
            error_y={"type": "data", "array": overall[f"{name} sd"]},
            customdata=overall["queries"],
            hovertemplate=f"%{{x}}<br>{name} %{{y:.3f}} over %{{customdata}} queries",
        )
    fig.update_layout(
        title="Ranking quality (mean, ± sd over queries)",
        barmode="group",
        yaxis={"range": [0, 1.05], "title": "score"},
        xaxis={"title": "job"},
    )
    return fig
