"""The engine tests of tests/unit/test_conformance.py (split from it by kind; docs/tests.md).

Output every OpenAI client can read: real output against the SDK's types and vLLM's.

The fast tests build lines the way the worker does from hand-made completions; the engine
test runs a mixed file of every endpoint and every option that changes a body's shape
through ``core run`` and ``core export``, and validates each line it gets back."""

from __future__ import annotations

import json

import pytest

from core.endpoints import CHAT_URL, COMPLETIONS_URL, RESPONSES_URL
from tests.support.cli import cli
from tests.support.conformance import (
    validate_line,
)
from tests.support.warm_engine import started_job


def _line(custom_id: str, url: str, **body) -> str:
    if url == CHAT_URL and "messages" not in body:
        body["messages"] = [{"role": "user", "content": "Name a colour."}]
    line = {"custom_id": custom_id, "method": "POST", "url": url}
    return json.dumps({**line, "body": {"model": "gpt-4o-mini", **body}})


SCHEMA = {
    "type": "object",
    "properties": {"colour": {"type": "string"}},
    "required": ["colour"],
}


CONVERSATION = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": "Capital of France?"},
    {"role": "assistant", "content": "Paris"},
    {"role": "user", "content": "And of Italy?"},
]


LINES = {
    "chat": _line("chat", CHAT_URL, max_tokens=4),
    "chat-n": _line("chat-n", CHAT_URL, max_tokens=3, n=2, temperature=0.8, seed=1),
    "chat-greedy-n": _line("chat-greedy-n", CHAT_URL, max_tokens=3, n=3, temperature=0),
    "chat-logprobs": _line("chat-logprobs", CHAT_URL, max_tokens=3, logprobs=True, top_logprobs=3),
    "chat-json": _line(
        "chat-json",
        CHAT_URL,
        max_tokens=24,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA}},
    ),
    "chat-stop": _line("chat-stop", CHAT_URL, max_tokens=8, stop=[" ", "\n"], temperature=0),
    "chat-conversation": _line("chat-conversation", CHAT_URL, messages=CONVERSATION, max_tokens=3),
    "chat-length": _line("chat-length", CHAT_URL, max_tokens=1, min_tokens=1),
    "chat-too-long": _line(
        "chat-too-long", CHAT_URL, messages=[{"role": "user", "content": "word " * 9000}]
    ),
    "cmpl": _line("cmpl", COMPLETIONS_URL, prompt="The sky is", max_tokens=3),
    "cmpl-logprobs": _line("cmpl-logprobs", COMPLETIONS_URL, prompt="One, two,", max_tokens=3,
                           logprobs=2, n=2, temperature=0.9),
    "cmpl-stop": _line("cmpl-stop", COMPLETIONS_URL, prompt="A\nB\nC", max_tokens=6, stop="\n"),
    "resp": _line("resp", RESPONSES_URL, input="Say hello.", max_output_tokens=64, temperature=0),
    "resp-messages": _line("resp-messages", RESPONSES_URL, input=CONVERSATION[1:],
                           instructions="Answer in one word.", max_output_tokens=3),
    "resp-logprobs": _line("resp-logprobs", RESPONSES_URL, input="Hi", max_output_tokens=2,
                           top_logprobs=2),
    "resp-json": _line("resp-json", RESPONSES_URL, input="A colour as JSON.",
                       max_output_tokens=24, temperature=0,
                       text={"format": {"type": "json_schema", "name": "c", "schema": SCHEMA}}),
    "resp-length": _line("resp-length", RESPONSES_URL, input="Tell a story.", max_output_tokens=1),
    "invalid": _line("invalid", CHAT_URL, max_tokens=2, min_tokens=5),
}  # fmt: skip


@pytest.mark.engine
def test_real_output_of_every_endpoint_and_shape_validates(warm_home, tmp_path, default_model):
    batch, out = tmp_path / "mixed.jsonl", tmp_path / "out.jsonl"
    batch.write_text("\n".join(LINES.values()) + "\n")
    urls = {cid: json.loads(raw)["url"] for cid, raw in LINES.items()}

    result = cli("run", str(batch), "-o", str(out), "--skip-invalid")

    assert result.returncode == 4, result.stderr[-2000:]  # completed, two lines failed
    lines = {
        json.loads(raw)["custom_id"]: json.loads(raw) for raw in out.read_text().split("\n")[:-1]
    }
    assert sorted(lines) == sorted(LINES)
    parsed = {cid: validate_line(line, urls[cid]) for cid, line in lines.items()}

    assert parsed["chat-too-long"] is None and parsed["invalid"] is None
    assert lines["chat-too-long"]["error"]["code"] == "invalid_request"  # the check's
    assert lines["invalid"]["error"]["line"] == list(LINES).index("invalid") + 1
    assert lines["invalid"]["error"]["param"] == "body.min_tokens"
    assert len(parsed["chat-n"].choices) == 2
    greedy = [c.message.content for c in parsed["chat-greedy-n"].choices]
    assert len(greedy) == 3 and len(set(greedy)) == 1 and greedy[0]
    tokens = parsed["chat-greedy-n"].usage.completion_tokens  # each copy counted, as billed
    assert tokens % 3 == 0 and 1 <= tokens // 3 <= 3
    top = parsed["chat-logprobs"].choices[0].logprobs.content
    assert len(top) == parsed["chat-logprobs"].usage.completion_tokens
    assert all(len(t.top_logprobs) == 3 for t in top)
    assert "colour" in json.loads(parsed["chat-json"].choices[0].message.content)
    assert " " not in parsed["chat-stop"].choices[0].message.content.strip()
    assert parsed["chat-length"].choices[0].finish_reason == "length"
    for choice in parsed["cmpl-logprobs"].choices:
        assert "".join(choice.logprobs.tokens) == choice.text
        assert all(len(t) <= 2 for t in choice.logprobs.top_logprobs)
    assert "\n" not in parsed["cmpl-stop"].choices[0].text
    assert parsed["resp"].status == "completed" and parsed["resp"].output_text
    assert parsed["resp-length"].status == "incomplete"
    assert parsed["resp-length"].incomplete_details.reason == "max_output_tokens"
    logprobs = parsed["resp-logprobs"].output[0].content[0].logprobs
    assert logprobs and all(len(t.top_logprobs) == 2 for t in logprobs)
    assert "colour" in json.loads(parsed["resp-json"].output_text)

    # The JSONL export is the same OpenAI format, line for line.
    job = started_job(result, warm_home)
    exported = tmp_path / "export.jsonl"
    result = cli("export", job.job_id, "-o", str(exported))
    assert result.returncode == 0, result.stderr[-2000:]
    again = [json.loads(raw) for raw in exported.read_text().splitlines()]
    assert sorted(line["custom_id"] for line in again) == sorted(LINES)
    for line in again:
        validate_line(line, urls[line["custom_id"]])
