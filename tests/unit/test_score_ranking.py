"""A ``/v1/score`` line of one query and a list of documents is a ranking too: Results show
its documents ranked by score, and with relevance labels in its metadata it gets NDCG@k
and MRR beside the rerank lines'; Dashboards chart the ranking quality per job. (Lines on
a cross-encoder: tests/unit/test_cross_encoder.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.store.db import Store
from core.store.ranking import SEVERAL_QUERIES, ranking_quality
from tests.support.jobs import finished_job
from tests.support.score_ranking import DOCS, VECTORS, score_row


def test_one_query_score_lines_are_graded_and_several_queries_say_why(tmp_path: Path):
    rows = [
        score_row("good", [1, 0, 0]),
        score_row("bad", [0, 1, 0], queries="sky?", documents=DOCS),
        # Two queries paired one to one with two documents: not a ranking of one query.
        {
            **score_row("pairs", [1, 0], queries=["q1", "q2"], documents=["a", "b"]),
            "vectors": VECTORS,
        },
    ]
    job = finished_job(tmp_path, rows)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    quality = ranking_quality(store, [job.job_id], k=10)
    per_query = quality.queries.set_index("custom_id")
    assert sorted(per_query.index) == ["bad", "good"]
    assert per_query.loc["good", "ndcg"] == pytest.approx(1.0)
    assert per_query.loc["good", "query"] == "sky?"  # text_1's text
    assert per_query.loc["bad", "reciprocal_rank"] == pytest.approx(1 / 3)
    assert quality.not_graded == {SEVERAL_QUERIES: 1}
