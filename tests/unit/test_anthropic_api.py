"""Anthropic's Message Batches API (``/v1/messages/batches``), through the pinned anthropic
SDK against the API's routes served on 127.0.0.1 in this process (the SDK speaks httpx2, so
it needs a real socket). No worker runs (``no_worker``): a job's results are written as its
worker writes them; tests/engine/test_anthropic_api_engine.py runs the model.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import pytest
import uvicorn
from anthropic.types import Message
from anthropic.types.messages import (
    DeletedMessageBatch,
    MessageBatch,
    MessageBatchIndividualResponse,
)
from anthropic.types.shared import ErrorResponse
from starlette.applications import Starlette

from core.api.keys import create_key
from core.api.routes import api_routes
from core.config import data_paths
from core.jobs.folder import JobFolder
from core.run.outputs import error_line
from core.schemas import JobStatus
from tests.support.browser import free_port

VERSION = {"anthropic-version": "2023-06-01"}


@pytest.fixture
def url(studio_home: Path, no_worker: list, default_model: Path) -> Iterator[str]:
    """The API's routes on a free loopback port, in a thread of this process."""
    port = free_port()
    config = uvicorn.Config(
        Starlette(routes=api_routes()), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def client(url: str, key: str | None = None) -> anthropic.Anthropic:
    """A client as a pipeline written for Anthropic makes one, with the studio's URL: with a
    key, or (None) none at all, as this machine's user."""
    if key is None:
        return anthropic.Anthropic(
            base_url=url,
            api_key=None,
            default_headers={"Authorization": anthropic.Omit()},
            max_retries=0,
        )
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)


def request(custom_id: str, text: str = "Say hi.", **params) -> dict:
    return {
        "custom_id": custom_id,
        "params": {
            "model": "claude-sonnet-4-5",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": text}],
            **params,
        },
    }


TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def _answer(custom_id: str, text: str | None, finish: str, stop=None, calls=None) -> str:
    """An output line as the worker writes a chat answer (core/run/outputs.py)."""
    message = {"role": "assistant", "content": text, "tool_calls": calls}
    body = {
        "id": f"chatcmpl-{custom_id}",
        "object": "chat.completion",
        "created": 1,
        "model": "SmolLM2-135M-Instruct",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "stop_reason": stop}],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 5,
            "total_tokens": 17,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
    response = {"status_code": 200, "request_id": "r", "body": body}
    return json.dumps({"id": "b", "custom_id": custom_id, "response": response, "error": None})


def _end(job: JobFolder, state: str, output: list[str], errors: list[str], total: int) -> None:
    """The job as its worker leaves it."""
    job.output.write_text("".join(line + "\n" for line in output))
    job.errors.write_text("".join(line + "\n" for line in errors))
    status = JobStatus(total=total, done=len(output) + len(errors))
    status.succeeded, status.failed = len(output), len(errors)
    for step in ("queued", "running", state):
        status.enter(step)
    status.finished_at = status.history[-1]["at"]
    job.write_status(status)


def test_a_message_batch_is_a_job_whose_results_come_back_as_messages(url):
    studio = client(url)  # this machine's user, no key
    made = studio.messages.batches.create(
        requests=[
            request(
                "stopped",
                system=[{"type": "text", "text": "Be brief."}],
                stop_sequences=["END"],
                temperature=0.2,
                top_k=5,
                metadata={"user_id": "u1"},
            ),
            request("cut", [{"type": "text", "text": "Count"}, {"type": "text", "text": "up."}]),
            request("tool", tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather"}),
            request("plain"),
            request("failed"),
        ]
    )
    assert isinstance(made, MessageBatch) and made.processing_status == "in_progress"
    assert made.request_counts.processing == 5 and made.results_url is None
    assert made.expires_at.timestamp() - made.created_at.timestamp() == 24 * 3600
    # The same job as any: made by submit, its lines the chat requests the product runs.
    job = JobFolder(data_paths().jobs / made.id)
    spec = job.read_spec()
    assert spec.batch is not None and spec.batch.api == "anthropic"
    lines = [json.loads(line) for line in job.input.read_text().splitlines()]
    assert [line["url"] for line in lines] == ["/v1/chat/completions"] * 5
    first = lines[0]["body"]
    assert first["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "Be brief."}],
    }
    assert (first["stop"], first["temperature"], first["top_k"]) == (["END"], 0.2, 5)
    assert lines[2]["body"]["tools"][0]["function"]["parameters"] == TOOL["input_schema"]
    assert lines[2]["body"]["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    _end(
        job,
        "completed",
        [
            _answer("stopped", "Hi", "stop", stop="END"),
            _answer("cut", "1 2 3", "length"),
            _answer("tool", None, "tool_calls", calls=[call]),
            _answer("plain", "Hello!", "stop"),
        ],
        [json.dumps(error_line("failed", "engine_rejected", "the prompt is too long", 400))],
        total=5,
    )
    ended = studio.messages.batches.retrieve(made.id)
    assert ended.processing_status == "ended" and ended.ended_at is not None
    assert ended.request_counts.model_dump() == {
        "processing": 0,
        "succeeded": 4,
        "errored": 1,
        "canceled": 0,
        "expired": 0,
    }
    assert ended.results_url == f"{url}/v1/messages/batches/{made.id}/results"
    got = {r.custom_id: r.result for r in studio.messages.batches.results(made.id)}
    assert got["stopped"].message.stop_reason == "stop_sequence"
    assert got["stopped"].message.stop_sequence == "END"
    assert got["cut"].message.stop_reason == "max_tokens"
    assert got["plain"].message.stop_reason == "end_turn"
    assert got["plain"].message.content[0].text == "Hello!"
    assert got["plain"].message.usage.input_tokens == 12
    assert got["plain"].message.usage.output_tokens == 5
    tool = got["tool"].message
    assert tool.stop_reason == "tool_use" and tool.content[0].type == "tool_use"
    assert (tool.content[0].name, tool.content[0].input) == ("get_weather", {"city": "Oslo"})
    assert got["failed"].type == "errored"
    assert got["failed"].error.error.type == "invalid_request_error"
    assert "too long" in got["failed"].error.error.message
    # Every line is the SDK's own type, read strictly by its pydantic models.
    raw = httpx.get(ended.results_url, headers=VERSION)
    for line in raw.text.splitlines():
        parsed = MessageBatchIndividualResponse.model_validate_json(line)
        if parsed.result.type == "succeeded":
            Message.model_validate(json.loads(line)["result"]["message"])
    MessageBatch.model_validate(
        httpx.get(f"{url}/v1/messages/batches/{made.id}", headers=VERSION).json()
    )
    # Both dialects serve the job under one id.
    openai_view = httpx.get(f"{url}/v1/batches/{made.id}").json()
    assert (
        openai_view["status"] == "completed" and openai_view["endpoint"] == "/v1/chat/completions"
    )
    deleted = studio.messages.batches.delete(made.id)
    assert isinstance(deleted, DeletedMessageBatch) and deleted.id == made.id
    assert not job.path.exists()
    with pytest.raises(anthropic.NotFoundError):
        studio.messages.batches.retrieve(made.id)


def test_a_cancelled_batch_ends_with_its_requests_canceled_and_a_running_one_cannot_go(url):
    studio = client(url)
    made = studio.messages.batches.create(requests=[request("a"), request("b")])
    with pytest.raises(anthropic.BadRequestError, match="cancel it"):
        studio.messages.batches.delete(made.id)  # still processing
    cancelled = studio.messages.batches.cancel(made.id)
    assert isinstance(cancelled, MessageBatch)
    assert cancelled.processing_status == "ended"  # it had not started: ended at once
    assert cancelled.cancel_initiated_at is not None
    assert cancelled.request_counts.canceled == 2 and cancelled.request_counts.processing == 0
    results = list(studio.messages.batches.results(made.id))
    assert sorted((r.custom_id, r.result.type) for r in results) == [
        ("a", "canceled"),
        ("b", "canceled"),
    ]
    with pytest.raises(anthropic.BadRequestError, match="ended"):
        studio.messages.batches.cancel(made.id)


def test_an_expired_batch_says_which_requests_expired(url):
    studio = client(url)
    made = studio.messages.batches.create(requests=[request("done"), request("late")])
    job = JobFolder(data_paths().jobs / made.id)
    late = error_line("late", "expired", "the job's completion window ended", 408)
    _end(job, "expired", [_answer("done", "ok", "stop")], [json.dumps(late)], total=2)
    counts = studio.messages.batches.retrieve(made.id).request_counts
    assert (counts.succeeded, counts.expired, counts.errored) == (1, 1, 0)
    kinds = {r.custom_id: r.result.type for r in studio.messages.batches.results(made.id)}
    assert kinds == {"done": "succeeded", "late": "expired"}


def test_the_list_pages_newest_first_by_after_id_and_before_id(url):
    studio = client(url)
    made = [studio.messages.batches.create(requests=[request(f"r{i}")]).id for i in range(5)]
    newest_first = list(reversed(made))
    first = studio.messages.batches.list(limit=2)
    assert [b.id for b in first.data] == newest_first[:2] and first.has_more
    assert (first.first_id, first.last_id) == (newest_first[0], newest_first[1])
    assert [b.id for b in studio.messages.batches.list(limit=2)] == newest_first  # SDK pages on
    after = studio.messages.batches.list(limit=2, after_id=newest_first[3])
    assert [b.id for b in after.data] == newest_first[4:] and not after.has_more
    before = studio.messages.batches.list(limit=2, before_id=newest_first[3])
    assert [b.id for b in before.data] == newest_first[1:3] and before.has_more
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        studio.messages.batches.list(limit=1001)


def _error(reply: httpx.Response, status: int, kind: str) -> str:
    """The reply is Anthropic's error body with this status, as its SDK's type reads it."""
    assert reply.status_code == status, reply.text
    body = ErrorResponse.model_validate(reply.json())
    assert body.type == "error" and body.error.type == kind
    return body.error.message


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (request("x", temperature=1.5), "requests[0] (custom_id 'x'): params.temperature"),
        (request("x", thinking={"type": "enabled"}), "params.thinking"),
        (request("x", [{"type": "image", "source": {}}]), "params.messages[0].content[0].type"),
        (request("has space"), "requests[0] (custom_id 'has space'): custom_id"),
        # Refused by the product's own check, named the Anthropic way.
        (
            request("x", tools=[TOOL], tool_choice={"type": "tool", "name": "nope"}),
            "requests[0] (custom_id 'x'): params.tool_choice",
        ),
        (request("x", max_tokens=0), "params.max_tokens"),
    ],
)
def test_a_request_that_cannot_run_refuses_the_batch_naming_its_custom_id_and_field(url, bad, said):
    ok = request("fine")
    reply = httpx.post(f"{url}/v1/messages/batches", json={"requests": [ok, bad]}, headers=VERSION)
    message = _error(reply, 400, "invalid_request_error")
    assert said.replace("requests[0]", "requests[1]") in message
    assert not list(data_paths().jobs.glob("job_*"))  # nothing was made
    with pytest.raises(anthropic.BadRequestError) as raised:
        client(url).messages.batches.create(requests=[bad])  # type: ignore[list-item]
    assert said in raised.value.message


def test_errors_are_anthropics_shape_for_a_missing_batch_a_bad_key_and_no_version(url):
    _error(
        httpx.get(f"{url}/v1/messages/batches/job_none", headers=VERSION), 404, "not_found_error"
    )
    bad_key = {**VERSION, "x-api-key": "bs-guess"}
    assert "bs-gues" in _error(
        httpx.get(f"{url}/v1/messages/batches", headers=bad_key), 401, "authentication_error"
    )
    assert "anthropic-version" in _error(
        httpx.get(f"{url}/v1/messages/batches"), 400, "invalid_request_error"
    )
    _error(
        httpx.post(f"{url}/v1/messages/batches", content=b"{", headers=VERSION),
        400,
        "invalid_request_error",
    )
    _error(httpx.get(f"{url}/v1/messages/nothing", headers=VERSION), 404, "not_found_error")
    with pytest.raises(anthropic.NotFoundError):
        client(url).messages.batches.retrieve("job_none")
    with pytest.raises(anthropic.AuthenticationError):
        client(url, "bs-guess").messages.batches.list()


def test_a_key_sees_its_own_batches_in_either_dialect_and_nothing_else(url):
    home = data_paths().home
    alice_key, bob_key = create_key(home, "alice"), create_key(home, "bob")
    alice, bob = client(url, alice_key), client(url, bob_key)
    made = alice.messages.batches.create(requests=[request("a")])
    assert [b.id for b in alice.messages.batches.list()] == [made.id]
    assert list(bob.messages.batches.list()) == []
    with pytest.raises(anthropic.NotFoundError):
        bob.messages.batches.retrieve(made.id)
    with pytest.raises(anthropic.NotFoundError):
        bob.messages.batches.cancel(made.id)
    with pytest.raises(anthropic.NotFoundError):
        bob.messages.batches.delete(made.id)
    # x-api-key carries the key too (Anthropic's header), on both dialects' routes.
    as_alice = httpx.get(f"{url}/v1/batches", headers={"x-api-key": alice_key}).json()
    assert [b["id"] for b in as_alice["data"]] == [made.id]
    as_bob = httpx.get(f"{url}/v1/batches", headers={"x-api-key": bob_key}).json()
    assert as_bob["data"] == []
    # An OpenAI batch of bob's is a message batch of his, and never alice's.
    upload = httpx.post(
        f"{url}/v1/files",
        headers={"Authorization": f"Bearer {bob_key}"},
        files={
            "file": (
                "b.jsonl",
                json.dumps(
                    {
                        "custom_id": "q",
                        "method": "POST",
                        "url": "/v1/chat/completions",
                        "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                    }
                )
                + "\n",
            )
        },
        data={"purpose": "batch"},
    ).json()
    openai_batch = httpx.post(
        f"{url}/v1/batches",
        headers={"Authorization": f"Bearer {bob_key}"},
        json={
            "input_file_id": upload["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
    ).json()
    assert [b.id for b in bob.messages.batches.list()] == [openai_batch["id"]]
    assert [b.id for b in alice.messages.batches.list()] == [made.id]
    # This machine's user (loopback, no key) sees both.
    assert {b.id for b in client(url).messages.batches.list()} == {made.id, openai_batch["id"]}
