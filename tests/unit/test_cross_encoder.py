"""``/v1/score`` and ``/v1/rerank`` on a cross-encoder folder (a model that reads a query
and a document together and scores the pair), made here without a hub
(tests/support/cross_encoder.py): vLLM takes it for a cross-encoder, its scores equal what
transformers computes for the same pairs, a rerank ranks by them, the check counts each
pair with that model's tokenizer against that model's limit, and a job of such lines
writes one result per line and resumes as any job does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.check import check_file
from core.check.scoring import MAX_DOCUMENTS
from core.endpoints import EMBEDDINGS_URL, RERANK_URL
from core.model_folders import is_cross_encoder, is_embedding_model, is_pooling_model
from core.schemas import JobDefaults
from tests.support.cross_encoder import pair_tokens
from tests.support.cross_encoder_batches import DOCS, LONG, QUERY, RUNS, _line, _write


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
