"""The pages tests of tests/unit/test_scoring.py (split from it by kind; docs/tests.md).

``/v1/score`` and ``/v1/rerank``: the check, the output lines in vLLM's response shapes,
and a run on the built-in embedding model as a bi-encoder, whose scores must equal the
cosine of the same model's embeddings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.check import check_file
from core.endpoints import RERANK_URL
from core.schemas import JobDefaults
from tests.support.scoring import _line


def _labelled_rerank_rows() -> list[dict[str, Any]]:
    vectors = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.5]]  # ranks docs 0, 2, 1
    rows = []
    for cid, labels in (("good", [1, 0, 0]), ("bad", [0, 1, 0])):
        body = {"query": f"<b>{cid}</b>", "documents": ["<i>a</i>", "b", "c"],
                "metadata": {"relevance": labels}}  # fmt: skip
        rows.append({"custom_id": cid, "vectors": vectors, "request": _line(cid, RERANK_URL, body)})
    return rows


def test_results_and_dashboards_show_the_ranking_and_its_quality(studio_home):
    from tests.support.pages import job_in_home, open_page

    job_in_home(studio_home, _labelled_rerank_rows())
    at = open_page("results.py")
    assert not at.exception
    frames = [d.value for d in at.dataframe]
    [ranked] = [f for f in frames if "relevance" not in f.columns and "rank" in f.columns]
    assert list(ranked["document"]) == [0, 2, 1] and ranked["text"][0] == "<i>a</i>"
    assert list(ranked["label"]) == [1.0, 0.0, 0.0]  # the detail of "good", the first row
    [overall] = [f for f in frames if "MRR" in f.columns]
    assert overall["MRR"][0] == pytest.approx((1 + 1 / 3) / 2)
    [per_query] = [f for f in frames if "reciprocal rank" in f.columns]
    assert list(per_query["query"]) == ["<b>good</b>", "<b>bad</b>"]  # text, not HTML

    at = open_page("dashboards.py")
    assert not at.exception
    [overall] = [d.value for d in at.dataframe if "MRR" in d.value.columns]
    assert overall["NDCG@10"][0] == pytest.approx(0.75)


def test_build_page_makes_a_rerank_batch(studio_home: Path):
    from tests.support.pages import open_build_page

    at = open_build_page()
    at.radio(key="build_kind").set_value("Rerank").run()
    at.selectbox(key="build_rerank_query").set_value("channel").run()
    at.selectbox(key="build_rerank_doc").set_value("subject").run()
    at.selectbox(key="build_rerank_label").set_value("(none)").run()
    assert not at.exception, [e.message for e in at.exception]
    first = json.loads(at.code[0].value)
    assert first["url"] == RERANK_URL and first["body"]["query"] == "email"
    assert first["body"]["documents"][0] == "Charged twice this month"
    assert len(first["body"]["documents"]) > 1 and "relevance" not in first["body"]["metadata"]
    at.button(key="build_save").click().run()
    saved = Path(at.session_state["built_file"])
    assert check_file(saved, JobDefaults()).errors == []
