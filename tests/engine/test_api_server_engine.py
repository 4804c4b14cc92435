"""The engine tests of tests/unit/test_api_server.py (split from it by kind; docs/tests.md).

The Batch API on a running ``python -m core serve``, through the pinned openai SDK.

One server per module serves the pages and ``/v1`` on one port, on the session's warm home
(``warm_served``); the engine tests run the built-in model through it, on the resident
worker's warm engine, as a pipeline that only changed its ``base_url`` would."""

from __future__ import annotations

import json
import time
import uuid

import openai
import pytest
from openai.types import Batch, FileObject

from core.api.keys import create_key
from core.endpoints import CHAT_URL
from core.jobs.folder import JobFolder
from tests.support.api_server import POLL_SECONDS, chats, client_of
from tests.support.conformance import validate_line
from tests.support.warm_engine import wait_until

ENGINE_DEADLINE = 480  # seconds: a model load and a small batch on 2 shared cores


def wait_for(client: openai.OpenAI, batch_id: str, until: set[str]) -> tuple[Batch, list[str]]:
    """Polls a batch until its status is in ``until``; returns it and the statuses seen."""
    seen: list[str] = []
    deadline = time.monotonic() + ENGINE_DEADLINE
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if not seen or seen[-1] != batch.status:
            seen.append(batch.status)
        if batch.status in until:
            return batch, seen
        time.sleep(POLL_SECONDS)
    pytest.fail(f"batch {batch_id} still {seen[-1]} after {ENGINE_DEADLINE} s (saw {seen})")


@pytest.mark.engine
def test_the_sdk_uploads_creates_polls_and_downloads_a_batch_run_by_the_engine(warm_served):
    client = client_of(warm_served)
    upload = client.files.create(file=("questions.jsonl", chats(6)), purpose="batch")
    assert isinstance(upload, FileObject)
    batch = client.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"pipeline": "nightly"},
    )
    # As OpenAI's: validating until a worker takes it; the warm engine may have already
    # (a fresh-clone run saw in_progress in the create's own answer).
    assert batch.status in ("validating", "in_progress")
    done, seen = wait_for(client, batch.id, {"completed", "failed", "cancelled", "expired"})
    assert done.status == "completed", (seen, done)
    order = ["validating", "in_progress", "finalizing", "completed"]
    assert [order.index(s) for s in seen] == sorted(order.index(s) for s in seen)
    assert done.created_at <= done.in_progress_at <= done.finalizing_at <= done.completed_at
    assert done.request_counts.model_dump() == {"total": 6, "completed": 6, "failed": 0}
    assert done.error_file_id is None and done.metadata == {"pipeline": "nightly"}
    lines = [json.loads(line) for line in client.files.content(done.output_file_id).iter_lines()]
    assert sorted(line["custom_id"] for line in lines) == [f"q{i}" for i in range(6)]
    for line in lines:
        answer = validate_line(line, CHAT_URL)
        assert answer.choices[0].message.content  # the model wrote something
    # It is a job like any other: the app's job folder holds it, named from its file.
    spec = json.loads((warm_served.home / "jobs" / batch.id / "job.json").read_text())
    assert spec["name"] == "questions" and spec["batch"]["input_file_id"] == upload.id
    # The input may go once the batch is made: the job keeps its own copy.
    assert client.files.delete(upload.id).deleted
    assert client.batches.retrieve(batch.id).status == "completed"
    ids = [b.id for b in client.batches.list(limit=1)]  # one per page: the SDK pages on
    assert batch.id in ids and len(ids) == len(set(ids))


@pytest.mark.engine
def test_a_batch_cancelled_while_it_runs_stops_its_engine_and_keeps_what_finished(warm_served):
    """Issue 58, item 5: every request is inside the engine at once (120 of a window of
    256); a cancel aborts them instead of letting them all finish into a completed batch."""
    client = client_of(warm_served)
    upload = client.files.create(file=("many.jsonl", chats(120, max_tokens=64)), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    job = JobFolder(warm_served.home / "jobs" / batch.id)
    wait_until(job, lambda s: s.state == "running", timeout=ENGINE_DEADLINE)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    gone, seen = wait_for(client, batch.id, {"cancelled", "completed", "failed"})
    assert gone.status == "cancelled", seen
    assert gone.cancelling_at and gone.cancelled_at
    finished = gone.request_counts.completed
    assert finished < 120 and gone.request_counts.failed == 0, gone.request_counts
    if finished:  # what finished before the cancel is kept
        output = client.files.content(gone.output_file_id).iter_lines()
        lines = [json.loads(line) for line in output]
        assert len(lines) == finished
        for line in lines:
            validate_line(line, CHAT_URL)
    said = f"{finished} of 120 requests have a result ({finished} succeeded)"
    assert said in job.read_status().message
    assert f"{120 - finished} were cancelled without one" in job.read_status().message


@pytest.mark.engine
def test_a_batch_cancelled_right_after_its_creation_ends_cancelled(warm_served):
    """Issue 58, item 5: cancelled at once, whatever the worker was doing (taking the job,
    loading, running), it ends cancelled with OpenAI's two times, never completed."""
    client = client_of(warm_served)
    upload = client.files.create(file=("soon.jsonl", chats(40, max_tokens=32)), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert client.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    gone, seen = wait_for(client, batch.id, {"cancelled", "completed", "failed"})
    assert gone.status == "cancelled", seen
    assert gone.created_at <= gone.cancelling_at <= gone.cancelled_at
    assert gone.request_counts.completed < 40


@pytest.mark.engine
def test_a_client_nobody_here_wrote_runs_a_batch_by_base_url_alone(warm_served, tmp_path):
    """openai-batch (PyPI, requirements.txt's test section), given the studio's base URL
    and nothing else: its own code uploads, creates, polls and downloads."""
    from openai_batch import Batch as ClientBatch
    from openai_batch.providers import Provider

    key = create_key(warm_served.home, f"openai-batch-{uuid.uuid4().hex[:8]}")
    provider = Provider(base_url=f"{warm_served.url}/v1", api_key=key)
    source, output, errors = (tmp_path / n for n in ("in.jsonl", "output.jsonl", "errors.jsonl"))
    source.write_bytes(chats(3).getvalue())
    # The file is given by its path, as its command line takes one (its in-memory builder
    # reads the temporary file it has just closed: that client's own bug in 0.3.4).
    with ClientBatch(
        submission_input_file=str(source), output_file=output, error_file=errors, provider=provider
    ) as batch:
        ended, output_path, error_path = batch.submit_wait_download(
            interval=POLL_SECONDS, metadata={"client": "openai-batch"}
        )
    assert ended.status == "completed", ended.errors
    assert error_path is None and not errors.exists()
    assert str(output_path) == str(output)
    lines = [json.loads(raw) for raw in output.read_text().splitlines()]
    assert sorted(line["custom_id"] for line in lines) == ["q0", "q1", "q2"]
    for line in lines:
        assert validate_line(line, CHAT_URL) is not None  # a success, in OpenAI's shape
    studio = client_of(warm_served).batches.retrieve(ended.id)
    assert studio.metadata == {"client": "openai-batch"}
    assert studio.request_counts.completed == 3
