"""A ``/v1/score`` line of one query and a list of documents is a ranking too: Results show
its documents ranked by score, and with relevance labels in its metadata it gets NDCG@k
and MRR beside the rerank lines'; Dashboards chart the ranking quality per job. (Lines on
a cross-encoder: tests/test_cross_encoder.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.endpoints import SCORE_URL
from core.store.db import Store
from core.store.ranking import SEVERAL_QUERIES, ranking_quality
from tests.support.jobs import finished_job
from tests.support.pages import job_in_home, open_page, values

# The query's vector first, then the documents': cosines 1, 0 and 0.89 rank 0, 2, 1.
VECTORS = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.5]]
DOCS = ["<i>a</i>", "b", "c"]


def score_row(custom_id: str, labels: list[Any], **texts: Any) -> dict[str, Any]:
    body = {"model": "m", **(texts or {"text_1": "sky?", "text_2": DOCS})}
    body["metadata"] = {"relevance": labels}
    line = {"custom_id": custom_id, "method": "POST", "url": SCORE_URL, "body": body}
    return {"custom_id": custom_id, "vectors": VECTORS, "request": line}


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


def test_results_rank_a_score_lines_documents_and_dashboards_chart_the_quality(
    studio_home: Path,
):
    job_in_home(studio_home, [score_row("good", [1, 0, 0]), score_row("bad", [0, 1, 0])])
    at = open_page("results.py")
    assert not at.exception
    frames = [d.value for d in at.dataframe]
    [ranked] = [f for f in frames if "rank" in f.columns and "document" in f.columns]
    assert list(ranked["document"]) == [0, 2, 1] and ranked["text"][0] == "<i>a</i>"
    assert list(ranked["label"]) == [1.0, 0.0, 0.0]
    [overall] = [f for f in frames if "MRR" in f.columns]
    assert overall["MRR"][0] == pytest.approx((1 + 1 / 3) / 2)

    at = open_page("dashboards.py")
    assert not at.exception
    figures = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    [chart] = [f for f in figures if f["layout"]["title"]["text"].startswith("Ranking quality")]
    bars = {trace["name"]: trace for trace in chart["data"]}
    assert set(bars) == {"NDCG@10", "MRR"}
    assert values(bars["NDCG@10"]["y"]) == pytest.approx([0.75])
    assert values(bars["MRR"]["y"]) == pytest.approx([(1 + 1 / 3) / 2])
