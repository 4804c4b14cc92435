"""The engine tests of tests/pages/test_vector_pages.py (split from it by kind; docs/tests.md).

The Results page's vector views on a synthetic embedding job (AppTest, no engine): the
summary, similar-to, near duplicates, the map and the exports, each checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from core.store import text_query as tq
from core.store import vectors as vec

pytestmark = pytest.mark.usefixtures("studio_home")


@pytest.mark.engine
def test_core_embed_gives_the_models_own_vectors(embedding_model, tmp_path, warm_home) -> None:
    """A typed text as the page embeds it (on the resident worker's warm engine): the
    built-in model on vLLM, its vectors those of the sentence-transformers recipe (as a
    job's are). ``warm_home`` replaces the module's fresh home (set up before it)."""
    import time

    from tests.support.embeddings import reference_vectors

    texts = ["Please refund the duplicate payment.", "A cat sat on the mat."]
    started = time.monotonic()
    vectors = tq.embed_texts(embedding_model, texts)
    print(f"{len(texts)} typed texts embedded: {time.monotonic() - started:.1f} s")
    expected = reference_vectors(embedding_model, texts)
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    cosines = (vectors * expected).sum(1) / np.linalg.norm(vectors, axis=1)
    assert cosines.min() >= 0.999, cosines
    with pytest.raises(vec.VectorError, match="is not a model folder"):
        tq.embed_texts(tmp_path, ["x"])
