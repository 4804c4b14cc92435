"""The engine tests of tests/unit/test_cross_encoder.py (split from it by kind; docs/tests.md).

``/v1/score`` and ``/v1/rerank`` on a cross-encoder folder (a model that reads a query
and a document together and scores the pair), made here without a hub
(tests/support/cross_encoder.py): vLLM takes it for a cross-encoder, its scores equal what
transformers computes for the same pairs, a rerank ranks by them, the check counts each
pair with that model's tokenizer against that model's limit, and a job of such lines
writes one result per line and resumes as any job does."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from vllm.entrypoints.pooling.scoring.protocol import RerankResponse, ScoreResponse

from core.endpoints import RERANK_URL
from core.jobs.ledger import reconcile
from tests.support.cli import run_cli
from tests.support.cross_encoder import pair_tokens, transformers_scores
from tests.support.cross_encoder_batches import DOCS, LONG, QUERY, RUNS, _line, _write
from tests.support.engine_child import run_child
from tests.support.warm_engine import run_in_background, wait_until


@pytest.mark.engine
def test_vllm_scores_each_pair_as_transformers_does_in_vllms_response_shapes(
    cross_encoder_model: Path, tmp_path: Path
):
    batch = _write(tmp_path / "runs.jsonl", RUNS)
    out = tmp_path / "scores.json"

    # Cold start: vLLM's own reading of the folder (score_type, max_model_len) and float32
    # scores (a job's engine runs bfloat16), from an engine in a child process.
    got = run_child(out, "score", str(cross_encoder_model), str(batch), str(out))

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


@pytest.mark.engine
def test_a_cross_encoder_job_killed_mid_run_resumes_with_one_result_per_line(
    warm_home: Path, cross_encoder_model: Path, tmp_path: Path
):
    count = 2000
    lines = [
        _line(f"r{i:04d}", RERANK_URL, {"query": f"refund {i}?", "documents": DOCS})
        for i in range(count)
    ]
    lines.append(_line("long", RERANK_URL, {"query": QUERY, "documents": [LONG]}))
    path, out = _write(tmp_path / "rerank.jsonl", lines), tmp_path / "out.jsonl"
    mapping = f"reranker={cross_encoder_model}"
    # On the warm worker, which it kills: the resume's worker is the warm one after it.
    cli, job = run_in_background(warm_home, str(path), "-o", str(out), "--map", mapping,
                                 "--skip-invalid", "--chunk-size", "64")  # fmt: skip
    wait_until(job, lambda s: s.state == "running" and s.done >= 200)
    os.kill(job.read_status().pid, signal.SIGKILL)
    cli.communicate(timeout=60)
    assert 0 < len(reconcile(job).missing) < len(lines)  # killed midway

    result = run_cli("resume", job.job_id)

    assert result.returncode == 4, result.stderr[-2000:]  # completed; the long line failed
    written = [json.loads(raw)["custom_id"] for raw in job.output.read_text().splitlines()]
    assert sorted(written) == [f"r{i:04d}" for i in range(count)]  # none lost, none twice
    final = [json.loads(raw) for raw in out.read_text().splitlines()]
    assert [x["custom_id"] for x in final] == [line["custom_id"] for line in lines]
    final = {x["custom_id"]: x for x in final}
    assert "at most 64 per pair" in final["long"]["error"]["message"]
    for custom_id in ("r0000", f"r{count - 1:04d}"):
        rerank = RerankResponse.model_validate(final[custom_id]["response"]["body"])
        scores = [r.relevance_score for r in rerank.results]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
