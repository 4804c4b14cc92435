"""The engine tests of tests/unit/test_embedding_model.py (split from it by kind; docs/tests.md).

The built-in embedding model: prepared from its package, told apart from chat models,
its limits read from the folder, and (on the real engine, the session's warm one) vLLM's
vectors equal to the sentence-transformers recipe."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.jobs.engine_files import embed_on_engine
from tests.support.cli import run_cli
from tests.support.embedding_lines import decoded, embed_line
from tests.support.embeddings import reference_vectors

TEXTS = [
    "The invoice was paid twice; please refund one payment.",
    "A cat sat on the mat.",
    "Die Lieferung kam beschädigt an.",
    # ~200 tokens: past the 128-token truncation that the folder's tokenizer.json carries,
    # so a vector cut there would differ from the reference.
    " ".join(f"item{i} arrived late" for i in range(45)),
]


@pytest.mark.engine
def test_vllm_vectors_equal_the_sentence_transformers_recipe(embedding_model, warm_home, tmp_path):
    batch, out = tmp_path / "texts.jsonl", tmp_path / "out.jsonl"
    lines = [embed_line(f"t{i}", input=text) for i, text in enumerate(TEXTS)]
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = run_cli("run", str(batch), "-o", str(out), "--no-reuse")  # vLLM's, made now
    assert result.returncode == 0, result.stderr[-2000:]
    bodies = [json.loads(raw)["response"]["body"] for raw in out.read_text().splitlines()]
    assert bodies[3]["usage"]["prompt_tokens"] > 128  # the long text was not cut at 128
    vectors = np.array([decoded(body["data"][0]) for body in bodies], dtype=np.float32)
    expected = reference_vectors(embedding_model, TEXTS)
    assert vectors.shape == expected.shape == (len(TEXTS), 384)
    cosines = (vectors * expected).sum(1) / (
        np.linalg.norm(vectors, axis=1) * np.linalg.norm(expected, axis=1)
    )
    assert cosines.min() >= 0.999, cosines
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    # vLLM loaded the folder with its 256-token limit: the engine itself (the typed-text
    # path runs no check before it) refuses a longer text, naming that limit.
    over = embed_on_engine(warm_home, embedding_model, [" ".join(["refund"] * 300)], timeout=300)
    assert over.vectors is None and over.error and "256" in over.error, over
