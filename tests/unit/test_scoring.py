"""``/v1/score`` and ``/v1/rerank``: the check, the output lines in vLLM's response shapes,
and a run on the built-in embedding model as a bi-encoder, whose scores must equal the
cosine of the same model's embeddings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from core.check import check_file
from core.check.engine_requests import ScoreRequest
from core.check.requests import parse_request
from core.check.sampling import RequestError
from core.check.scoring import MAX_DOCUMENTS
from core.endpoints import RERANK_URL, SCORE_URL
from core.run.outputs import Embeddings
from core.run.retry import result_line
from core.schemas import JobDefaults
from tests.support.cli import cli
from tests.support.scoring import DOCS, QUERY, REFUSED, VALID, _line, _write


@pytest.mark.parametrize("name", sorted(VALID))
def test_score_and_rerank_lines_in_vllms_shapes_pass(name: str):
    from vllm.entrypoints.launchers.run_batch import BatchRequestInput

    url, body = VALID[name]
    line = _line(name, url, body)
    BatchRequestInput.model_validate(line)  # vLLM's batch runner reads the same line
    request = parse_request(url, name, line["body"], JobDefaults())
    assert isinstance(request, ScoreRequest) and request.inputs
    assert len(request.inputs) - request.queries >= 1


def test_the_check_refuses_bad_lines_with_line_and_field(
    tmp_path: Path, default_model: Path, embedding_model: Path
):
    path = tmp_path / "bad.jsonl"
    lines = [_line("ok", *VALID["rerank"])]
    lines += [_line(f"bad{i}", url, body) for i, (url, body, _) in enumerate(REFUSED)]
    _write(path, lines)
    report = check_file(
        path, JobDefaults(), model_folder=default_model, embedding_folder=embedding_model
    )
    got = {p.line: p for p in report.errors}
    assert sorted(got) == list(range(2, len(REFUSED) + 2))  # every bad line, by its number
    for index, (_, _, param) in enumerate(REFUSED):
        assert got[index + 2].param == param, got[index + 2].message
    assert f"at most {MAX_DOCUMENTS:,} per line" in got[6].message  # names the limit
    assert "takes at most 256 per input" in got[len(REFUSED) + 1].message


def test_unsupported_cross_encoder_fields_say_why():
    body = {"query": QUERY, "documents": DOCS, "instruction": "Judge relevance."}
    with pytest.raises(RequestError, match="is read whole, as written"):
        parse_request(RERANK_URL, "c", body, JobDefaults())


def _vectors(*rows: list[float]) -> Embeddings:
    return Embeddings(12, [np.asarray(r, dtype=np.float32) for r in rows])


def test_rerank_writes_vllms_response_most_relevant_first_and_top_n():
    from vllm.entrypoints.pooling.scoring.protocol import RerankResponse

    request = parse_request(RERANK_URL, "r", VALID["rerank-top"][1], JobDefaults())
    query, a, b, c = [1, 0], [0, 1], [1, 1], [1, 0.1]  # cosines 0, 0.707, 0.995
    line = result_line(request, "MiniLM", _vectors(query, a, b, c))
    body = RerankResponse.model_validate(line["response"]["body"])
    assert [r.index for r in body.results] == [2, 1]  # top 2 of 3, best first
    assert body.results[0].document.text == DOCS[2]
    assert body.results[0].relevance_score == pytest.approx(0.99504, abs=1e-4)
    assert body.usage.prompt_tokens == 12


def test_score_pairs_one_with_many_and_many_with_many():
    from vllm.entrypoints.pooling.scoring.protocol import ScoreResponse

    one = parse_request(SCORE_URL, "s", VALID["score-1n"][1], JobDefaults())
    body = result_line(one, "m", _vectors([1, 0], [1, 0], [0, 1], [-1, 0]))["response"]["body"]
    parsed = ScoreResponse.model_validate(body)
    assert [d.score for d in parsed.data] == pytest.approx([1, 0, -1])
    many = parse_request(SCORE_URL, "s", VALID["score-nn"][1], JobDefaults())
    body = result_line(many, "m", _vectors([1, 0], [0, 1], [0, 1], [0, 1]))["response"]["body"]
    assert [d["score"] for d in body["data"]] == pytest.approx([0, 1])  # q0-d0, q1-d1


def test_results_show_the_query_and_its_documents_ranked_with_scores(tmp_path: Path):
    from core.store.db import Store
    from tests.support.jobs import finished_job

    request = _line("r", *VALID["rerank"])
    vectors = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.1]]
    job = finished_job(tmp_path, [{"custom_id": "r", "vectors": vectors, "request": request}])
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    row = store.results(job.job_id).set_index("custom_id").loc["r"]
    assert (row["status"], row["prompt"]) == ("succeeded", QUERY)
    assert row["answer"] == "#2 0.9950, #1 0.7071, #0 0.0000"


def test_ndcg_and_reciprocal_rank_match_hand_computed_values():
    from core.store.ranking import ndcg_at_k, reciprocal_rank

    labels = [0, 3, 0, 1]  # document 1 is the best, 3 also relevant
    assert ndcg_at_k([1, 3, 0, 2], labels, 10) == pytest.approx(1.0)
    # ranks 2 and 3: (7/log2(3) + 1/log2(4)) / (7/1 + 1/log2(3))
    expected = (7 / np.log2(3) + 1 / 2) / (7 + 1 / np.log2(3))
    assert ndcg_at_k([0, 1, 3, 2], labels, 10) == pytest.approx(expected)
    assert ndcg_at_k([0, 2, 1, 3], labels, 2) == 0.0  # nothing relevant in the top 2
    assert reciprocal_rank([0, 2, 3, 1], labels) == pytest.approx(1 / 3)
    assert reciprocal_rank([0, 2], labels) == 0.0  # cut by top_n before a relevant one


def test_results_grade_labelled_rerank_queries_per_query_and_overall(tmp_path: Path):
    from core.store.db import Store
    from core.store.ranking import ranking_quality
    from tests.support.jobs import finished_job

    docs = ["a", "b", "c"]
    vectors = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.5]]  # ranks docs 0, 2, 1
    rows = []
    for cid, labels in (("good", [1, 0, 0]), ("bad", [0, 1, 0]), ("none", [0, 0, 0]),
                        ("short", [1]), ("words", ["high", 0, 0])):  # fmt: skip
        body = {"query": "q", "documents": docs, "metadata": {"relevance": labels}}
        rows.append({"custom_id": cid, "vectors": vectors, "request": _line(cid, RERANK_URL, body)})
    job = finished_job(tmp_path, rows)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)

    quality = ranking_quality(store, [job.job_id], k=10)

    per_query = quality.queries.set_index("custom_id")
    assert sorted(per_query.index) == ["bad", "good"]
    assert per_query.loc["good", "ndcg"] == pytest.approx(1.0)
    assert per_query.loc["bad", "reciprocal_rank"] == pytest.approx(1 / 3)
    assert per_query.loc["bad", "ndcg"] == pytest.approx(0.5)  # rank 3: 1/log2(4)
    assert sum(quality.not_graded.values()) == 3  # no relevant, too few labels, not numbers
    [overall] = quality.overall().to_dict("records")
    assert overall["queries"] == 2
    assert overall["MRR"] == pytest.approx((1 + 1 / 3) / 2)
    assert overall["NDCG@10 sd"] == pytest.approx(np.std([1.0, 0.5], ddof=1))
    assert (overall["NDCG@10 min"], overall["NDCG@10 max"]) == pytest.approx((0.5, 1.0))


def test_cli_builds_a_rerank_batch_from_a_table_of_queries_and_documents(tmp_path: Path):
    table, out = tmp_path / "pairs.csv", tmp_path / "rerank.jsonl"
    pd.DataFrame(
        {
            "pair_id": ["p1", "p2", "p3", "p4", "p5"],
            "question": ["refund?", "refund?", "hours?", "refund?", "hours?"],
            "passage": ["Refunds take 5 days.", "We are closed Sunday.", "Open 9-5.", "x", ""],
            "relevant": [1, 0, 2, "yes", 0],
        }
    ).to_csv(table, index=False)
    result = cli("build", str(table), "-o", str(out), "--id-column", "pair_id",
                     "--rerank-query", "question", "--rerank-document", "passage",
                     "--rerank-label", "relevant", "--top-n", "5", "--task", "faq")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "row 4: error: the label in 'relevant' is not a number" in result.stdout
    assert "row 5: error: empty cell in 'passage'; row left out" in result.stdout
    lines = [json.loads(raw) for raw in out.read_text().splitlines()]
    assert [line["custom_id"] for line in lines] == ["faq:1", "faq:2"]
    first = lines[0]["body"]
    assert first["query"] == "refund?" and first["top_n"] == 5
    assert first["documents"] == ["Refunds take 5 days.", "We are closed Sunday."]
    assert first["metadata"] == {"task": "faq", "source_ids": ["p1", "p2"], "relevance": [1, 0]}
    assert lines[1]["body"]["documents"] == ["Open 9-5."]
    assert check_file(out, JobDefaults()).errors == []  # the check passes what it built
