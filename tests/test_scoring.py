"""``/v1/score`` and ``/v1/rerank``: the check, the output lines in vLLM's response shapes,
and a run on the built-in embedding model as a bi-encoder, whose scores must equal the
cosine of the same model's embeddings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import TypeAdapter
from vllm.entrypoints.launchers.run_batch import BatchRequestInput
from vllm.entrypoints.pooling.scoring.protocol import RerankResponse, ScoreResponse

from core.check import check_file
from core.check.engine_requests import ScoreRequest
from core.check.requests import parse_request
from core.check.sampling import RequestError
from core.check.scoring import MAX_DOCUMENTS
from core.config import default_embedding_model_dir
from core.endpoints import RERANK_URL, SCORE_URL
from core.run.outputs import Embeddings
from core.run.retry import result_line
from core.schemas import JobDefaults
from tests.conftest import run_cli

QUERY = "How do I get a refund?"
DOCS = [
    "Refunds are paid to the card you used within five days.",
    "Our office is closed on public holidays.",
    "To return an item, print the label and send it back for a refund.",
]
VALID: dict[str, tuple[str, dict[str, Any]]] = {
    "rerank": (RERANK_URL, {"query": QUERY, "documents": DOCS}),
    "rerank-top": (RERANK_URL, {"query": QUERY, "documents": DOCS, "top_n": 2}),
    "rerank-one": (RERANK_URL, {"query": QUERY, "documents": DOCS[0]}),
    "score-1n": (SCORE_URL, {"queries": QUERY, "documents": DOCS}),
    "score-nn": (SCORE_URL, {"queries": [QUERY, "opening hours"], "documents": DOCS[:2]}),
    "score-items": (SCORE_URL, {"queries": [QUERY], "items": DOCS}),
    "score-data": (SCORE_URL, {"data_1": QUERY, "data_2": DOCS[1]}),
    "score-text": (SCORE_URL, {"text_1": [QUERY], "text_2": [DOCS[2]], "metadata": {"k": 1}}),
}
IMAGE = {"content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (SCORE_URL, {"queries": [QUERY, "b"], "documents": DOCS}, "body.queries"),  # 2:3
    (SCORE_URL, {"queries": QUERY}, "body.documents"),
    (SCORE_URL, {"documents": DOCS}, "body.queries"),
    (SCORE_URL, {"input": QUERY}, "body.queries"),
    (RERANK_URL, {"query": QUERY, "documents": ["x"] * (MAX_DOCUMENTS + 1)}, "body.documents"),
    (RERANK_URL, {"query": QUERY, "documents": []}, "body.documents"),
    (RERANK_URL, {"query": QUERY, "documents": ["a", ""]}, "body.documents"),
    (RERANK_URL, {"query": "", "documents": DOCS}, "body.query"),
    (RERANK_URL, {"query": IMAGE, "documents": DOCS}, "body.query"),
    (RERANK_URL, {"query": QUERY, "documents": [IMAGE]}, "body.documents"),
    (RERANK_URL, {"query": QUERY, "documents": DOCS, "top_n": -1}, "body.top_n"),
    (
        RERANK_URL,
        {"query": QUERY, "documents": DOCS, "truncate_prompt_tokens": 8},
        "body.truncate_prompt_tokens",
    ),
    (RERANK_URL, {"query": QUERY, "documents": ["word " * 400]}, "body.documents"),  # too long
]


def _line(custom_id: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url,
            "body": {"model": "rerank-model", **body}}  # fmt: skip


def _write(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


# -- the check --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VALID))
def test_score_and_rerank_lines_in_vllms_shapes_pass(name: str):
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


# -- the output lines -------------------------------------------------------------------------


def _vectors(*rows: list[float]) -> Embeddings:
    return Embeddings(12, [np.asarray(r, dtype=np.float32) for r in rows])


def test_rerank_writes_vllms_response_most_relevant_first_and_top_n():
    request = parse_request(RERANK_URL, "r", VALID["rerank-top"][1], JobDefaults())
    query, a, b, c = [1, 0], [0, 1], [1, 1], [1, 0.1]  # cosines 0, 0.707, 0.995
    line = result_line(request, "MiniLM", _vectors(query, a, b, c))
    body = RerankResponse.model_validate(line["response"]["body"])
    assert [r.index for r in body.results] == [2, 1]  # top 2 of 3, best first
    assert body.results[0].document.text == DOCS[2]
    assert body.results[0].relevance_score == pytest.approx(0.99504, abs=1e-4)
    assert body.usage.prompt_tokens == 12


def test_score_pairs_one_with_many_and_many_with_many():
    one = parse_request(SCORE_URL, "s", VALID["score-1n"][1], JobDefaults())
    body = result_line(one, "m", _vectors([1, 0], [1, 0], [0, 1], [-1, 0]))["response"]["body"]
    parsed = ScoreResponse.model_validate(body)
    assert [d.score for d in parsed.data] == pytest.approx([1, 0, -1])
    many = parse_request(SCORE_URL, "s", VALID["score-nn"][1], JobDefaults())
    body = result_line(many, "m", _vectors([1, 0], [0, 1], [0, 1], [0, 1]))["response"]["body"]
    assert [d["score"] for d in body["data"]] == pytest.approx([0, 1])  # q0-d0, q1-d1


def test_results_show_the_query_and_its_documents_ranked_with_scores(tmp_path: Path):
    from core.store.db import Store
    from tests.factories import finished_job

    request = _line("r", *VALID["rerank"])
    vectors = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.1]]
    job = finished_job(tmp_path, [{"custom_id": "r", "vectors": vectors, "request": request}])
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    row = store.results(job.job_id).set_index("custom_id").loc["r"]
    assert (row["status"], row["prompt"]) == ("succeeded", QUERY)
    assert row["answer"] == "#2 0.9950, #1 0.7071, #0 0.0000"


# -- the real engine ---------------------------------------------------------------------------


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

    result = run_cli("run", str(batch), "-o", str(out))

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

    result = run_cli("run", str(batch), "-o", str(out), "--skip-invalid")  # no embeddings line

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


# -- ranking quality ---------------------------------------------------------------------------


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
    from tests.factories import finished_job

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


def _labelled_rerank_rows() -> list[dict[str, Any]]:
    vectors = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.5]]  # ranks docs 0, 2, 1
    rows = []
    for cid, labels in (("good", [1, 0, 0]), ("bad", [0, 1, 0])):
        body = {"query": f"<b>{cid}</b>", "documents": ["<i>a</i>", "b", "c"],
                "metadata": {"relevance": labels}}  # fmt: skip
        rows.append({"custom_id": cid, "vectors": vectors, "request": _line(cid, RERANK_URL, body)})
    return rows


def test_results_and_dashboards_show_the_ranking_and_its_quality(studio_home):
    from tests.test_pages import open_page
    from tests.test_results_pages import job_in_home

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


# -- the builder -------------------------------------------------------------------------------


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
    result = run_cli("build", str(table), "-o", str(out), "--id-column", "pair_id",
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


def test_build_page_makes_a_rerank_batch(studio_home: Path):
    from tests.test_builder import open_build_page

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
