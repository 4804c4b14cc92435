"""The pages tests of tests/unit/test_score_ranking.py (split from it by kind; docs/tests.md).

A ``/v1/score`` line of one query and a list of documents is a ranking too: Results show
its documents ranked by score, and with relevance labels in its metadata it gets NDCG@k
and MRR beside the rerank lines'; Dashboards chart the ranking quality per job. (Lines on
a cross-encoder: tests/unit/test_cross_encoder.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.pages import job_in_home, open_page, values
from tests.support.score_ranking import score_row


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
