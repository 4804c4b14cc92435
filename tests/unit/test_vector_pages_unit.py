"""The unit tests of tests/pages/test_vector_pages.py (split from it by kind; docs/tests.md).

The Results page's vector views on a synthetic embedding job (AppTest, no engine): the
summary, similar-to, near duplicates, the map and the exports, each checked against numpy."""

from __future__ import annotations

import pytest

from core.store import text_query as tq

pytestmark = pytest.mark.usefixtures("studio_home")


def test_the_query_model_is_the_jobs_own_or_the_built_in_one(tmp_path, monkeypatch) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "config.json").write_text('{"architectures": ["BertModel"], "hidden_size": 8}')
    (own / "model.safetensors").write_bytes(b"")
    (own / "tokenizer.json").write_text("{}")
    assert tq.query_model(own, 8) == (own, "the job's own model")
    monkeypatch.setenv("BATCH_STUDIO_MODELS", str(tmp_path / "none"))
    model, note = tq.query_model("/gone/all-MiniLM-L6-v2", 384)
    assert model is None and "not prepared" in note
    monkeypatch.setattr(tq, "default_embedding_model_dir", lambda: own)  # 8-d vectors
    model, note = tq.query_model("/gone/other", 384)
    assert model is None and "makes 8-d vectors, not the job's 384" in note
    model, note = tq.query_model("/gone/other", 8)
    assert model == own and "comparable only if the job used the same model" in note
