"""The engine tests of tests/unit/test_embedding_model.py (split from it by kind; docs/tests.md).

The built-in embedding model: prepared from its package, told apart from chat models,
its limits read from the folder, and (on the real engine) vLLM's vectors equal to the
sentence-transformers recipe."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.embeddings import reference_vectors
from tests.support.engine_child import run_child

TEXTS = [
    "The invoice was paid twice; please refund one payment.",
    "A cat sat on the mat.",
    "Die Lieferung kam beschädigt an.",
    # ~200 tokens: past the 128-token truncation that the folder's tokenizer.json carries,
    # so a vector cut there would differ from the reference.
    " ".join(f"item{i} arrived late" for i in range(45)),
]


@pytest.mark.engine
def test_vllm_vectors_equal_the_sentence_transformers_recipe(embedding_model, tmp_path):
    out = tmp_path / "out.json"
    found = run_child(out, "embed", str(embedding_model), str(out), *TEXTS)
    assert found["max_model_len"] == 256
    vectors = np.array(found["vectors"], dtype=np.float32)
    assert found["prompt_tokens"][3] > 128  # the long text was not cut at 128
    expected = reference_vectors(embedding_model, TEXTS)
    assert vectors.shape == expected.shape == (len(TEXTS), 384)
    cosines = (vectors * expected).sum(1) / (
        np.linalg.norm(vectors, axis=1) * np.linalg.norm(expected, axis=1)
    )
    assert cosines.min() >= 0.999, cosines
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
