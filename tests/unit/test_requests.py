"""The mapping from an OpenAI chat body to the engine's request."""

import json

import pytest
from pydantic import ValidationError

from core.check.engine_requests import CompletionRequest
from core.check.fast_path import decode_fast_chat_line, fast_chat_request
from core.check.requests import RequestError, parse_body, parse_request
from core.endpoints import CHAT_URL, COMPLETIONS_URL, RESPONSES_URL
from core.schemas import SAMPLING_BOUNDS, JobDefaults

USER = [{"role": "user", "content": "Hi"}]


def parse(**body):
    return parse_body("id-1", {"model": "m", "messages": USER, **body}, JobDefaults())


def test_sampling_fields_map_onto_sampling_params():
    request = parse(
        max_completion_tokens=12,
        temperature=0.3,
        top_p=0.9,
        stop="END",
        seed=7,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        repeat_penalty=1.2,
        n=2,
        logprobs=True,
        top_logprobs=3,
    )
    assert request.sampling == {
        "max_tokens": 12,
        "temperature": 0.3,
        "top_p": 0.9,
        "stop": ["END"],
        "seed": 7,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "repetition_penalty": 1.2,
        "n": 2,
        "logprobs": 3,
    }
    assert request.warnings == []


def test_job_defaults_fill_what_the_body_leaves_out():
    request = parse_body("a", {"model": "m", "messages": USER}, JobDefaults(max_tokens=64))
    assert request.sampling["max_tokens"] == 64
    assert request.sampling["temperature"] == 1.0


def test_max_tokens_is_read_when_max_completion_tokens_is_absent():
    assert parse(max_tokens=5).sampling["max_tokens"] == 5


def test_multi_turn_and_text_parts_become_plain_text():
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "你好"}, {"type": "text", "text": "!"}],
        },
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Again"},
    ]
    request = parse_body("a", {"model": "m", "messages": messages}, JobDefaults())
    assert [m["content"] for m in request.messages] == ["Be brief.", "你好!", "Hello", "Again"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"stream": True}, "body.stream must be false"),
        ({"temperature": 3}, "body.temperature must be in [0, 2]"),
        ({"top_p": 0}, "body.top_p must be in (0, 1]"),
        ({"max_tokens": 0}, "body.max_tokens must be at least 1"),
        ({"n": 0}, "body.n must be at least 1"),
        ({"tools": [{"type": "function"}]}, "body.tools[0].function must be an object"),
        ({"top_logprobs": 2}, "needs body.logprobs"),
        ({"stop": [1]}, "body.stop must be a string"),
        ({"messages": []}, "body.messages must be a non-empty list"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "role is 'robot'"),
        ({"messages": [{"role": "system", "content": "x"}]}, "no user message"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "'image_url' part; the model reads text only",
        ),
        ({"messages": [*USER, {"role": "assistant", "content": "x"}]}, "ends with an assistant"),
        (
            {"max_tokens": 3, "min_tokens": 9},
            "body.min_tokens (9) is above body.max_tokens (3)",
        ),
        ({"min_tokens": 300}, "body.min_tokens (300) is above the job's default max_tokens (256)"),
        ({"logit_bias": {"5": 101}}, "body.logit_bias[5] is 101.0; a bias must be in [-100, 100]"),
        ({"logit_bias": {"-1": 1}}, "body.logit_bias has token id -1"),
        ({"logit_bias": {"x": 1}}, "body.logit_bias must map token ids to numbers"),
    ],
)
def test_bad_bodies_name_the_field_and_the_fix(body, expected):
    with pytest.raises(RequestError, match=None) as info:
        parse(**body)
    assert expected in str(info.value)
    # The error's param names the field the message is about (an output line's error.param).
    assert info.value.param.startswith("body.")
    assert info.value.param.split(".")[1] in str(info.value)


def test_min_tokens_up_to_the_limit_and_greedy_n_pass_the_check():
    assert parse(max_tokens=3, min_tokens=3).sampling["min_tokens"] == 3
    # OpenAI serves n > 1 at temperature 0; the engine runs it once and copies the answer.
    assert parse(n=3, temperature=0).sampling["n"] == 3


def test_a_responses_line_asking_for_several_answers_is_refused():
    body = {"model": "m", "input": "Hi", "n": 2}
    with pytest.raises(RequestError, match="a response holds one answer"):
        parse_request(RESPONSES_URL, "r", body, JobDefaults())


def test_unknown_fields_are_warned_about_not_dropped_silently():
    request = parse(temprature=0.2)
    assert request.warnings == ["body.temprature is not a field the engine knows; it is ignored"]


def test_response_format_json_schema_is_kept_for_structured_output():
    schema = {"type": "object", "properties": {"label": {"type": "string"}}}
    request = parse(response_format={"type": "json_schema", "json_schema": {"schema": schema}})
    assert request.json_schema == schema
    assert parse(response_format={"type": "json_object"}).json_schema == {}
    assert parse(response_format={"type": "text"}).json_schema is None


# -- /v1/completions and /v1/responses --------------------------------------------------------


def test_completions_keep_the_raw_prompt_and_its_sampling():
    body = {"model": "m", "prompt": "Once upon", "max_tokens": 7, "logprobs": 2, "stop": "\n"}
    request = parse_request(COMPLETIONS_URL, "c1", body, JobDefaults())
    assert (request.url, request.prompt) == (COMPLETIONS_URL, "Once upon")
    assert isinstance(request, CompletionRequest) and not hasattr(request, "messages")  # no chat
    assert request.sampling == {
        "max_tokens": 7,
        "temperature": 1.0,
        "top_p": 1.0,
        "stop": ["\n"],
        "logprobs": 2,
    }
    assert request.defaulted == ("temperature", "top_p")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"prompt": ["a", "b"]}, "body.prompt must be one string"),
        ({}, "body.prompt is missing"),
        ({"prompt": "x", "echo": True}, "echo is not supported"),
        ({"prompt": "x", "stream": True}, "body.stream must be false"),
    ],
)
def test_bad_completions_bodies_say_what_to_change(body, expected):
    with pytest.raises(RequestError) as info:
        parse_request(COMPLETIONS_URL, "c", {"model": "m", **body}, JobDefaults())
    assert expected in str(info.value)


def test_responses_map_input_instructions_and_max_output_tokens():
    body = {
        "model": "m",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
        "max_output_tokens": 9,
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
    }
    request = parse_request(RESPONSES_URL, "r1", body, JobDefaults())
    assert request.url == RESPONSES_URL
    assert request.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert request.sampling["max_tokens"] == 9
    assert request.json_schema == {"type": "object"}
    simple = parse_request(RESPONSES_URL, "r2", {"model": "m", "input": "Hello"}, JobDefaults())
    assert simple.messages == [{"role": "user", "content": "Hello"}]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, "body.input is missing"),
        ({"input": "x", "previous_response_id": "resp_1"}, "cannot continue a stored response"),
        ({"input": [{"type": "function_call_output"}]}, "only messages are supported"),
        ({"input": "x", "max_output_tokens": 0}, "body.max_output_tokens must be at least 1"),
    ],
)
def test_bad_responses_bodies_say_what_to_change(body, expected):
    with pytest.raises(RequestError) as info:
        parse_request(RESPONSES_URL, "r", {"model": "m", **body}, JobDefaults())
    assert expected in str(info.value)


def test_instructions_after_the_conversation_started_are_warned_about():
    messages = [*USER, {"role": "assistant", "content": "a"}, {"role": "system", "content": "s"},
                {"role": "user", "content": "b"}]  # fmt: skip
    request = parse(messages=messages)
    assert "messages[2] is a system message after the conversation started" in request.warnings[0]


@pytest.mark.parametrize(
    "body",
    [
        {"max_tokens": 5},
        {"max_completion_tokens": 3, "max_tokens": 9, "temperature": 0, "top_p": 0.5},
        {"seed": 3, "n": 2, "metadata": {"a": [1, 2]}, "user": "u", "store": False},
        {"messages": [{"role": "developer", "content": "d"}, *USER]},
        {"messages": [*USER, {"role": "assistant", "content": "x"}, *USER], "stream": False},
    ],
)
def test_the_fast_path_builds_the_same_request_as_the_generic_one(body):
    full = {"model": "m", "messages": USER, **body}
    line = {"custom_id": "id-1", "method": "POST", "url": "/v1/chat/completions", "body": full}
    fast = decode_fast_chat_line(json.dumps(line).encode())
    assert fast is not None
    assert fast_chat_request(fast, JobDefaults(max_tokens=77)) == parse_body(
        "id-1", full, JobDefaults(max_tokens=77)
    )


@pytest.mark.parametrize(
    "body",
    [
        {"temperature": 3},
        {"stream": True},
        {"frobnicate": 1},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
        {"messages": [{"role": "system", "content": "x"}]},
    ],
)
def test_anything_unusual_leaves_the_fast_path(body):
    full = {"model": "m", "messages": USER, **body}
    line = {"custom_id": "id-1", "method": "POST", "url": "/v1/chat/completions", "body": full}
    fast = decode_fast_chat_line(json.dumps(line).encode())
    assert fast is None or fast_chat_request(fast, JobDefaults()) is None


FAST_FIELDS = ("max_tokens", "temperature", "top_p", "seed", "n")


@pytest.mark.parametrize("field", sorted(SAMPLING_BOUNDS))
def test_each_sampling_bound_is_the_same_for_the_check_its_fast_path_and_job_defaults(field):
    """A value just past either end of a field's range (core.schemas.SAMPLING_BOUNDS) is
    refused by the check, never kept by the fast path, and refused as a job default; the
    ends themselves are taken by all three (top_p's open end excepted)."""
    low, high, low_open = SAMPLING_BOUNDS[field]
    step = 1 if isinstance(low, int) and field not in ("temperature", "top_p", "min_p") else 0.01
    outside = [low if low_open else low - step] + ([] if high is None else [high + step])
    inside = ([] if low_open else [low]) + ([] if high is None else [high])
    extra = {"max_tokens": 2**62} if field == "min_tokens" else {}  # min_tokens <= max_tokens
    for value, taken in [(v, False) for v in outside] + [(v, True) for v in inside]:
        body = {"model": "m", "messages": USER, **extra, field: value}
        if field == "n" and value > 1:
            body["temperature"] = 1  # n > 1 at temperature 0 is copied, not refused
        try:
            parse_body("id-1", body, JobDefaults())
            checked = True
        except RequestError:
            checked = False
        assert checked == taken, (field, value)
        if field in FAST_FIELDS:
            line = {"custom_id": "i", "method": "POST", "url": CHAT_URL, "body": body}
            fast = decode_fast_chat_line(json.dumps(line).encode())
            assert (fast is not None) == taken, (field, value)
        if field in JobDefaults.model_fields:
            try:
                JobDefaults(**{field: value})
                defaulted = True
            except ValidationError:
                defaulted = False
            assert defaulted == taken, (field, value)
