"""The engine tests of tests/unit/test_scoring.py (split from it by kind; docs/tests.md).

``/v1/score`` and ``/v1/rerank``: the check, the output lines in vLLM's response shapes,
and a run on the built-in embedding model as a bi-encoder, whose scores must equal the
cosine of the same model's embeddings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter
from vllm.entrypoints.pooling.scoring.protocol import RerankResponse, ScoreResponse

from core.check import check_file
from core.config import default_embedding_model_dir
from core.endpoints import RERANK_URL, SCORE_URL
from core.schemas import JobDefaults
from tests.support.cli import cli
from tests.support.scoring import DOCS, QUERY, REFUSED, VALID, _line, _write


@pytest.mark.engine
def test_bi_encoder_scores_equal_the_cosine_of_the_same_models_embeddings(
    warm_home, tmp_path: Path
):
    texts = [QUERY, *DOCS, "opening hours"]
    lines = [_line(name, url, body) for name, (url, body) in VALID.items()]
    lines.append({"custom_id": "vectors", "method": "POST", "url": "/v1/embeddings",
                  "body": {"model": "rerank-model", "input": texts}})  # fmt: skip
    batch, out = tmp_path / "scores.jsonl", tmp_path / "out.jsonl"
    _write(batch, lines)
    assert check_file(batch, JobDefaults()).errors == []

    result = cli("run", str(batch), "-o", str(out))

    assert result.returncode == 0, result.stderr[-2000:]
    got = {line["custom_id"]: line for line in map(json.loads, out.read_text().splitlines())}
    assert all(line["error"] is None for line in got.values())
    vectors = {
        text: np.asarray(item["embedding"], dtype=np.float64)
        for text, item in zip(texts, got["vectors"]["response"]["body"]["data"], strict=True)
    }

    def cos(a: str, b: str) -> float:
        va, vb = vectors[a], vectors[b]
        return float(va @ vb / np.linalg.norm(va) / np.linalg.norm(vb))

    rerank = RerankResponse.model_validate(got["rerank"]["response"]["body"])
    assert rerank.model == default_embedding_model_dir().name
    for item in rerank.results:
        assert item.relevance_score == pytest.approx(cos(QUERY, DOCS[item.index]), abs=1e-4)
    scores = [r.relevance_score for r in rerank.results]
    assert scores == sorted(scores, reverse=True) and len(scores) == 3
    assert rerank.results[0].index in (0, 2)  # a refund document, not the holidays one
    top = RerankResponse.model_validate(got["rerank-top"]["response"]["body"])
    assert [r.index for r in top.results] == [r.index for r in rerank.results[:2]]
    score = ScoreResponse.model_validate(got["score-1n"]["response"]["body"])
    assert [d.score for d in score.data] == pytest.approx([cos(QUERY, d) for d in DOCS], abs=1e-4)
    nn = ScoreResponse.model_validate(got["score-nn"]["response"]["body"])
    expected = [cos(QUERY, DOCS[0]), cos("opening hours", DOCS[1])]
    assert [d.score for d in nn.data] == pytest.approx(expected, abs=1e-4)
    for name in ("score-items", "score-data", "score-text"):
        TypeAdapter(ScoreResponse).validate_python(got[name]["response"]["body"])


def sweep_lines() -> list[dict[str, Any]]:
    """Generated score and rerank lines the check must pass: every shape of vLLM's
    requests over texts of several kinds (short, another script, near the model's limit,
    many documents) and ``top_n`` below, at and past the number of documents."""
    texts = {
        "short": ["refund", "holiday", "parcel"],
        "script": ["返金はいつですか", "Возврат денег", "🙂 ok"],
        "long": ["word " * 240, "refund " * 120],  # near the 256-token limit
        "many": [f"document number {i} about refunds" for i in range(60)],
    }
    out = []
    for docs in texts.values():
        for top_n in (0, 1, len(docs), len(docs) + 5):
            out.append((RERANK_URL, {"query": docs[0], "documents": docs, "top_n": top_n}))
        for first, second in (("queries", "documents"), ("queries", "items"),
                              ("data_1", "data_2"), ("text_1", "text_2")):  # fmt: skip
            out.append((SCORE_URL, {first: docs[0], second: docs}))
            out.append((SCORE_URL, {first: docs, second: docs[::-1]}))
    return [_line(f"s{i}", url, body) for i, (url, body) in enumerate(out)]


@pytest.mark.engine
def test_every_score_and_rerank_line_the_check_passes_runs(
    warm_home, tmp_path: Path, default_model: Path, embedding_model: Path
):
    valid = sweep_lines()
    bad = [_line(f"bad{i}", url, body) for i, (url, body, _) in enumerate(REFUSED)]
    batch, out = tmp_path / "sweep.jsonl", tmp_path / "out.jsonl"
    _write(batch, valid + bad)
    report = check_file(batch, JobDefaults(), model_folder=default_model)
    assert sorted(p.line for p in report.errors) == list(
        range(len(valid) + 1, len(valid) + len(bad) + 1)
    )

    result = cli("run", str(batch), "-o", str(out), "--skip-invalid")  # no embeddings line

    assert result.returncode == 4, result.stderr[-2000:]  # completed; the bad lines failed
    got = {line["custom_id"]: line for line in map(json.loads, out.read_text().splitlines())}
    assert len(got) == len(valid) + len(bad)
    for line in valid:
        output, body = got[line["custom_id"]], line["body"]
        assert output["error"] is None, output["error"]
        if line["url"] == RERANK_URL:
            parsed = RerankResponse.model_validate(output["response"]["body"])
            want = min(body["top_n"] or len(body["documents"]), len(body["documents"]))
            assert len(parsed.results) == want
            scores = [r.relevance_score for r in parsed.results]
            assert scores == sorted(scores, reverse=True)
            assert all(body["documents"][r.index] == r.document.text for r in parsed.results)
        else:
            parsed = ScoreResponse.model_validate(output["response"]["body"])
            second = next(v for k, v in body.items() if k in ("documents", "items", "data_2",
                                                               "text_2"))  # fmt: skip
            assert [d.index for d in parsed.data] == list(range(len(second)))
            assert all(-1.0001 <= d.score <= 1.0001 for d in parsed.data)
    assert all(got[line["custom_id"]]["error"] for line in bad)
