"""What the tests split from tests/unit/test_refused_batches.py by kind share (docs/tests.md)."""

from __future__ import annotations

import io

import openai
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from core.api.keys import create_key
from core.api.routes import api_routes
from core.config import data_paths
from tests.support.jobs import request_line


@pytest.fixture
def client(studio_home) -> openai.OpenAI:
    key = create_key(data_paths().home, "alice")
    with TestClient(Starlette(routes=api_routes()), base_url="http://testserver") as http:
        yield openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=http)


def refused_batch(client: openai.OpenAI) -> openai.types.Batch:
    lines = [request_line("a", "fine"), "this is not JSON", request_line("c", "fine")]
    upload = io.BytesIO(("\n".join(lines) + "\n").encode())
    file = client.files.create(file=("bad.jsonl", upload), purpose="batch")
    batch = client.batches.create(
        input_file_id=file.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"name": "nightly refunds"},
    )
    assert batch.status == "failed"
    return batch
