"""The engine tests of tests/unit/test_cross_encoder.py (split from it by kind; docs/tests.md).

``/v1/score`` and ``/v1/rerank`` on a cross-encoder folder (a model that reads a query
and a document together and scores the pair), made here without a hub
(tests/support/cross_encoder.py): vLLM takes it for a cross-encoder, its scores equal what
transformers computes for the same pairs, a rerank ranks by them, the check counts each
pair with that model's tokenizer against that model's limit. A job of such lines, killed
and resumed, writes one result per line: tests/engine/test_faults.py (one kill for chat,
embeddings and rerank, one cold start)."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm.entrypoints.pooling.scoring.protocol import RerankResponse, ScoreResponse

from tests.support.cross_encoder import pair_tokens, transformers_scores
from tests.support.cross_encoder_batches import DOCS, QUERY, RUNS, _write
from tests.support.engine_child import EngineChild


@pytest.mark.engine
def test_vllm_scores_each_pair_as_transformers_does_in_vllms_response_shapes(
    cross_encoder_model: Path, tmp_path: Path, engine_child: EngineChild
):
    batch = _write(tmp_path / "runs.jsonl", RUNS)
    out = tmp_path / "scores.json"

    # vLLM's own reading of the folder (score_type, max_model_len) and float32 scores (a
    # job's engine runs bfloat16 where the CPU has it), from an engine in the session's
    # engine child: the sampling sweep's cold start, shared.
    got = engine_child.run(out, "score", str(cross_encoder_model), str(batch), str(out))

    assert got["score_type"] == "cross-encoder" and got["max_model_len"] == 64
    lines = {line["custom_id"]: line for line in got["lines"]}
    expected = transformers_scores(cross_encoder_model, [(QUERY, d) for d in DOCS])
    rerank = RerankResponse.model_validate(lines["rerank"]["response"]["body"])
    assert rerank.model == "tiny-reranker"
    by_index = {r.index: r.relevance_score for r in rerank.results}
    assert [by_index[i] for i in range(3)] == pytest.approx(expected, abs=1e-4)
    order = sorted(range(3), key=lambda i: -expected[i])
    assert [r.index for r in rerank.results] == order  # most relevant first
    assert [r.document.text for r in rerank.results] == [DOCS[i] for i in order]
    assert rerank.usage.prompt_tokens == sum(
        pair_tokens(cross_encoder_model, QUERY, d) for d in DOCS
    )
    top = RerankResponse.model_validate(lines["rerank-top"]["response"]["body"])
    assert [r.index for r in top.results] == order[:2]
    score = ScoreResponse.model_validate(lines["score-1n"]["response"]["body"])
    assert [d.score for d in score.data] == pytest.approx(expected, abs=1e-4)
    nn = ScoreResponse.model_validate(lines["score-nn"]["response"]["body"])
    pairs = [(QUERY, DOCS[0]), ("opening hours", DOCS[1])]
    assert [d.score for d in nn.data] == pytest.approx(
        transformers_scores(cross_encoder_model, pairs), abs=1e-4
    )
