"""``/v1/score`` and ``/v1/rerank`` on a cross-encoder folder (a model that reads a query
and a document together and scores the pair), made here without a hub
(tests/cross_encoder.py): vLLM takes it for a cross-encoder, its scores equal what
transformers computes for the same pairs, a rerank ranks by them, the check counts each
pair with that model's tokenizer against that model's limit, and a job of such lines
writes one result per line and resumes as any job does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from vllm.entrypoints.pooling.scoring.protocol import RerankResponse, ScoreResponse

from core.check import check_file
from core.check.scoring import MAX_DOCUMENTS
from core.config import REPO_ROOT
from core.endpoints import EMBEDDINGS_URL, RERANK_URL, SCORE_URL
from core.jobs.ledger import reconcile
from core.model_folders import is_cross_encoder, is_embedding_model, is_pooling_model
from core.schemas import JobDefaults
from tests.support.cli import run_cli
from tests.support.cross_encoder import pair_tokens, transformers_scores
from tests.support.engine_child import run_child
from tests.support.jobs import wait_for

QUERY = "How do I get a refund?"
DOCS = [
    "Refunds are paid to the card you used within five days.",
    "Our office is closed on public holidays.",
    "To return an item, print the label and send it back for a refund.",
]
LONG = "word " * 60  # with the query, past the 64 tokens the tiny reranker reads


def _line(custom_id: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url,
            "body": {"model": "reranker", **body}}  # fmt: skip


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


RUNS = [
    _line("rerank", RERANK_URL, {"query": QUERY, "documents": DOCS}),
    _line("rerank-top", RERANK_URL, {"query": QUERY, "documents": DOCS, "top_n": 2}),
    _line("score-1n", SCORE_URL, {"queries": QUERY, "documents": DOCS}),
    _line("score-nn", SCORE_URL, {"queries": [QUERY, "opening hours"], "documents": DOCS[:2]}),
]


def test_a_sequence_classifier_of_one_label_is_a_cross_encoder_and_nothing_else_is(
    cross_encoder_model: Path, embedding_model: Path, default_model: Path, tmp_path: Path
):
    assert is_cross_encoder(cross_encoder_model) and is_pooling_model(cross_encoder_model)
    assert not is_embedding_model(cross_encoder_model)
    assert not is_cross_encoder(embedding_model) and is_pooling_model(embedding_model)
    assert not is_cross_encoder(default_model) and not is_pooling_model(default_model)
    classifier = tmp_path / "two-labels"
    classifier.mkdir()
    config = json.loads((cross_encoder_model / "config.json").read_text())
    config["id2label"] = {"0": "NO", "1": "YES"}  # a classifier: vLLM scores no pairs on it
    (classifier / "config.json").write_text(json.dumps(config))
    assert not is_cross_encoder(classifier)


def test_the_check_counts_pairs_with_the_cross_encoder_and_refuses_what_it_cannot_run(
    cross_encoder_model: Path, default_model: Path, tmp_path: Path
):
    lines = [
        RUNS[0],
        RUNS[3],
        _line("long", RERANK_URL, {"query": QUERY, "documents": [DOCS[0], LONG]}),
        _line("many", RERANK_URL, {"query": QUERY, "documents": ["x"] * (MAX_DOCUMENTS + 1)}),
        _line("vectors", EMBEDDINGS_URL, {"input": QUERY}),
    ]
    path = _write(tmp_path / "rerank.jsonl", lines)
    report = check_file(
        path,
        JobDefaults(),
        model_folder=default_model,
        model_map={"reranker": str(cross_encoder_model)},
    )

    problems = {p.line: p for p in report.errors}
    assert sorted(problems) == [3, 4, 5]
    long = pair_tokens(cross_encoder_model, QUERY, LONG)
    assert long > 64 and problems[3].param == "body.documents"
    assert f"body.documents[1] and its query make a pair of {long} tokens" in problems[3].message
    assert "tiny-reranker reads at most 64 per pair" in problems[3].message
    assert problems[4].param == "body.documents"
    assert f"at most {MAX_DOCUMENTS:,} per line" in problems[4].message
    assert problems[5].param == "body.model" and "a cross-encoder" in problems[5].message
    assert "makes no vectors" in problems[5].message
    # Each pair counted as the model reads it: query and document together.
    pairs = [(QUERY, d) for d in DOCS] + [(QUERY, DOCS[0]), ("opening hours", DOCS[1])]
    assert report.prompt_tokens == sum(pair_tokens(cross_encoder_model, *p) for p in pairs)


def test_a_cross_encoder_in_the_models_folder_answers_to_its_own_name(
    studio_home: Path,
    cross_encoder_model: Path,
    default_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    """The names every entry point maps by (the API, core run, the inbox, Upload & check):
    a rerank line naming the folder runs on it, counted as its pairs."""
    from core.model_names import studio_model_map

    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny-reranker").symlink_to(cross_encoder_model)
    monkeypatch.setenv("BATCH_STUDIO_MODELS", str(models))
    mapping = studio_model_map()
    assert Path(mapping["tiny-reranker"]).resolve() == cross_encoder_model.resolve()
    line = RUNS[0] | {"body": {**RUNS[0]["body"], "model": "tiny-reranker"}}
    path = _write(tmp_path / "named.jsonl", [line])

    report = check_file(path, JobDefaults(), model_folder=default_model, model_map=mapping)

    assert report.errors == []
    pairs = [pair_tokens(cross_encoder_model, QUERY, d) for d in DOCS]
    assert report.prompt_tokens == sum(pairs)


@pytest.mark.engine
def test_vllm_scores_each_pair_as_transformers_does_in_vllms_response_shapes(
    cross_encoder_model: Path, tmp_path: Path
):
    batch = _write(tmp_path / "runs.jsonl", RUNS)
    out = tmp_path / "scores.json"

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
    studio_home: Path, cross_encoder_model: Path, tmp_path: Path
):
    count = 2000
    lines = [
        _line(f"r{i:04d}", RERANK_URL, {"query": f"refund {i}?", "documents": DOCS})
        for i in range(count)
    ]
    lines.append(_line("long", RERANK_URL, {"query": QUERY, "documents": [LONG]}))
    path, out = _write(tmp_path / "rerank.jsonl", lines), tmp_path / "out.jsonl"
    mapping = f"reranker={cross_encoder_model}"
    command = [sys.executable, "-m", "core", "run", str(path), "-o", str(out), "--map", mapping,
               "--skip-invalid", "--chunk-size", "64"]  # fmt: skip
    cli = subprocess.Popen(command, cwd=REPO_ROOT, env=os.environ.copy(), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    job = wait_for(studio_home / "jobs", lambda s: s.state == "running" and s.done >= 200)
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


def test_settings_says_what_each_model_folder_serves(
    studio_home: Path,
    cross_encoder_model: Path,
    default_model: Path,
    embedding_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    from tests.support.pages import open_page

    models = tmp_path / "models"
    models.mkdir()
    for folder in (default_model, embedding_model, cross_encoder_model):
        (models / folder.name).symlink_to(folder)
    monkeypatch.setenv("BATCH_STUDIO_MODELS", str(models))

    at = open_page("settings.py")

    assert not at.exception
    table = next(d.value for d in at.dataframe if "serves" in d.value.columns)
    serves = dict(zip(table["model"], table["serves"], strict=True))
    assert serves == {
        default_model.name: "chat",
        embedding_model.name: "embedding",
        "tiny-reranker": "cross-encoder",
    }
