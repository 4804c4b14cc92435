"""What the tests split from tests/unit/test_embeddings.py by kind share (docs/tests.md)."""

from __future__ import annotations

import base64

import numpy as np
from openai.types import CreateEmbeddingResponse

from core.endpoints import EMBEDDINGS_URL


def embed_line(custom_id: str, **body) -> dict:
    body = {"model": "text-embedding-3-small", **body}
    return {"custom_id": custom_id, "method": "POST", "url": EMBEDDINGS_URL, "body": body}


def sdk_parse(body: dict) -> CreateEmbeddingResponse:
    """The SDK's parse of a body: its type holds float lists, and the SDK decodes base64
    itself before parsing (as ``client.embeddings.create`` does), so we do too."""
    data = [{**item, "embedding": decoded(item).tolist()} for item in body["data"]]
    return CreateEmbeddingResponse.model_validate({**body, "data": data})


def decoded(item: dict) -> np.ndarray:
    """A data item's vector, whichever way it was written."""
    value = item["embedding"]
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4")
    return np.asarray(value, dtype=np.float32)
