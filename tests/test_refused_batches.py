"""A batch that failed validation made no job, but it was submitted: the Jobs page and
``core jobs list`` show it beside the jobs, with its state and reason (issue 38, item 14:
it was in ``GET /v1/batches`` and nowhere else)."""

from __future__ import annotations

import io
import json

import openai
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from core.api.keys import create_key
from core.api.routes import api_routes
from core.config import data_paths
from tests.support.cli import run_cli
from tests.support.jobs import request_line
from tests.support.pages import open_page


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


def test_core_jobs_list_shows_a_batch_that_failed_validation(client) -> None:
    batch = refused_batch(client)
    listed = run_cli("jobs", "list")
    assert listed.returncode == 0, listed.stderr
    [line] = [row for row in listed.stdout.splitlines() if batch.id in row]
    assert "failed" in line and "nightly refunds" in line
    assert "failed validation: line 2:" in line
    [row] = json.loads(run_cli("jobs", "list", "--json").stdout)
    assert row["job_id"] is None and row["batch_id"] == batch.id
    assert (row["state"], row["requests"], row["name"]) == ("failed", 0, "nightly refunds")
    assert row["reason"].startswith("failed validation: line 2: ")


def test_the_jobs_page_shows_a_batch_that_failed_validation_with_its_reason(client) -> None:
    batch = refused_batch(client)
    at = open_page("jobs.py")  # no job at all: the refused batch still shows
    assert "Batches that failed validation" in [s.value for s in at.subheader]
    [table] = [d.value for d in at.dataframe if "batch_id" in d.value.columns]
    [row] = table.to_dict("records")
    assert (row["batch_id"], row["state"], row["name"]) == (batch.id, "failed", "nightly refunds")
    assert row["reason"].startswith("failed validation: line 2: ")
    assert "No jobs yet" in at.info[0].value
