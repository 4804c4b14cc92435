"""Anthropic's Message Batches on a running ``python -m core serve``, through the pinned
anthropic SDK, run by the resident worker's warm engine (``warm_served``)."""

from __future__ import annotations

import json
import time
import uuid

import anthropic
import httpx
import pytest
from anthropic.types import Message
from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse

from core.api.keys import create_key
from tests.support.api_server import POLL_SECONDS

ENGINE_DEADLINE = 480  # seconds: a small batch on 2 shared cores


@pytest.mark.engine
def test_the_anthropic_sdk_creates_polls_and_reads_a_batch_the_engine_ran(warm_served):
    key = create_key(warm_served.home, f"anthropic-{uuid.uuid4().hex[:8]}")
    client = anthropic.Anthropic(base_url=warm_served.url, api_key=key, max_retries=0)
    tag = uuid.uuid4().hex[:8]  # never asked before: each request runs on the engine

    def params(text: str, **more) -> dict:
        user = {"role": "user", "content": f"{text} ({tag})"}
        return {
            "model": "claude-sonnet-4-5",
            "max_tokens": 24,
            "messages": [user],
            "temperature": 0,
            **more,
        }

    tool = {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
    made = client.messages.batches.create(
        requests=[
            {
                "custom_id": "plain",
                "params": params(
                    "Name a colour.", system=[{"type": "text", "text": "Answer in one word."}]
                ),
            },
            {"custom_id": "cut", "params": params("Write a long story about a fox.", max_tokens=2)},
            {
                "custom_id": "tool",
                "params": params(
                    "What is the weather in Oslo?",
                    max_tokens=64,
                    tools=[tool],
                    tool_choice={"type": "tool", "name": "get_weather"},
                ),
            },
        ]
    )
    assert made.processing_status == "in_progress"
    deadline = time.monotonic() + ENGINE_DEADLINE
    batch = made
    while batch.processing_status != "ended" and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        batch = client.messages.batches.retrieve(made.id)
    assert batch.processing_status == "ended", batch
    assert batch.request_counts.succeeded == 3, batch.request_counts
    got = {r.custom_id: r.result for r in client.messages.batches.results(made.id)}
    assert all(r.type == "succeeded" for r in got.values()), got
    assert got["plain"].message.content[0].text.strip()  # the model wrote something
    assert got["plain"].message.usage.input_tokens > 0
    assert got["cut"].message.stop_reason == "max_tokens"
    assert got["cut"].message.usage.output_tokens == 2
    call = got["tool"].message
    assert call.stop_reason == "tool_use" and call.content[-1].type == "tool_use"
    assert call.content[-1].name == "get_weather" and isinstance(call.content[-1].input, dict)
    # Every body is the SDK's own type, read strictly.
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    MessageBatch.model_validate(
        httpx.get(f"{warm_served.url}/v1/messages/batches/{made.id}", headers=headers).json()
    )
    for line in httpx.get(batch.results_url, headers=headers).text.splitlines():
        Message.model_validate(
            MessageBatchIndividualResponse.model_validate_json(line).result.message
        )
    # The same job through OpenAI's API: its chat answers, under the same id.
    openai_view = httpx.get(f"{warm_served.url}/v1/batches/{made.id}", headers=headers).json()
    assert openai_view["status"] == "completed"
    spec = json.loads((warm_served.home / "jobs" / made.id / "job.json").read_text())
    assert spec["batch"]["api"] == "anthropic"
    assert client.messages.batches.delete(made.id).id == made.id
    assert not (warm_served.home / "jobs" / made.id).exists()
