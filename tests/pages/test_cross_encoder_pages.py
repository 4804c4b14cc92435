"""The pages tests of tests/unit/test_cross_encoder.py (split from it by kind; docs/tests.md).

``/v1/score`` and ``/v1/rerank`` on a cross-encoder folder (a model that reads a query
and a document together and scores the pair), made here without a hub
(tests/support/cross_encoder.py): vLLM takes it for a cross-encoder, its scores equal what
transformers computes for the same pairs, a rerank ranks by them, the check counts each
pair with that model's tokenizer against that model's limit, and a job of such lines
writes one result per line and resumes as any job does."""

from __future__ import annotations

from pathlib import Path

import pytest


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
