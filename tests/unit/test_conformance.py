"""Output every OpenAI client can read: real output against the SDK's types and vLLM's.

The fast tests build lines the way the worker does from hand-made completions; the engine
test runs a mixed file of every endpoint and every option that changes a body's shape
through ``core run`` and ``core export``, and validates each line it gets back.
"""

from __future__ import annotations

import re

import openai
import pytest

from core.config import REPO_ROOT
from core.endpoints import CHAT_URL, COMPLETIONS_URL, RESPONSES_URL
from core.run.outputs import Choice, Completion, error_line, success_line
from tests.support.conformance import (
    SDK_TYPES,
    missing_fields,
    validate_line,
)

URLS = (CHAT_URL, COMPLETIONS_URL, RESPONSES_URL)


def _logprobs(tokens: list[str], top: int) -> list[dict]:
    def entry(token: str, logprob: float) -> dict:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    return [
        {**entry(t, -0.5), "top_logprobs": [entry(t, -0.5), entry("x", -2.0)][:top]} for t in tokens
    ]


COMPLETIONS = {
    "plain": Completion(9, [Choice("Blue.", "stop", 2)], cached_tokens=3, latency_ms=12),
    "two answers": Completion(9, [Choice("Red", "stop", 1), Choice("Green", "length", 1)]),
    "truncated": Completion(9, [Choice("A long", "length", 2, stop_reason=None)]),
    "stopped by a string": Completion(9, [Choice("Hi", "stop", 1, stop_reason="\n")]),
    "logprobs": Completion(9, [Choice("Hié", "stop", 2, logprobs=_logprobs(["Hi", "é"], 2))]),
    "logprobs, no alternatives": Completion(
        9, [Choice("Hi", "stop", 1, logprobs=_logprobs(["Hi"], 0))]
    ),
}


SAMPLING = {"max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "logprobs": 2}


@pytest.mark.parametrize(
    ("url", "shape"),
    [
        (url, shape)
        for url in URLS
        for shape in sorted(COMPLETIONS)
        # The check allows one answer per Responses request.
        if url != RESPONSES_URL or len(COMPLETIONS[shape].choices) == 1
    ],
)
def test_every_success_body_we_write_validates(url: str, shape: str):
    completion = COMPLETIONS[shape]
    line = success_line("c1", "SmolLM2", completion, url, SAMPLING)
    parsed = validate_line(line, url)
    if url == RESPONSES_URL:
        assert parsed.output_text == completion.choices[0].text
        assert parsed.status == ("incomplete" if shape == "truncated" else "completed")
    elif url == COMPLETIONS_URL:
        assert [c.text for c in parsed.choices] == [c.text for c in completion.choices]
        if completion.choices[0].logprobs:
            logprobs = parsed.choices[0].logprobs
            assert "".join(logprobs.tokens) == completion.choices[0].text
            assert logprobs.text_offset == [0, 2][: len(logprobs.tokens)]
    else:
        assert [c.message.content for c in parsed.choices] == [c.text for c in completion.choices]


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("invalid_request", 400, "invalid_request_error"),
        ("engine_rejected", 400, "invalid_request_error"),
        ("expired", 408, "timeout_error"),
        ("engine_error", 500, "server_error"),
    ],
)
def test_every_error_line_carries_openais_error_object(code: str, status: int, kind: str):
    line = error_line("c1", code, "what went wrong", status, line=7, param="body.n")
    assert validate_line(line, CHAT_URL) is None
    assert line["error"] == {
        "code": code,
        "message": "what went wrong",
        "param": "body.n",
        "type": kind,
        "line": 7,
    }


@pytest.mark.parametrize("url", URLS)
def test_every_field_the_sdk_requires_is_written(url: str):
    """Fails, naming the fields, when a newer SDK requires a field we do not write."""
    completion = COMPLETIONS["logprobs"]
    body = success_line("c1", "m", completion, url, SAMPLING)["response"]["body"]
    missing = missing_fields(SDK_TYPES[url], body)
    assert missing == set(), f"openai {openai.__version__} requires fields we do not write"


def test_the_sdk_we_validate_with_is_the_one_requirements_pin():
    pins = re.findall(r"^openai==(\S+)", (REPO_ROOT / "requirements.txt").read_text(), re.M)
    assert pins == [openai.__version__]
