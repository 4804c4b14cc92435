"""The mapping from an OpenAI chat body to the engine's request."""

import pytest

from core.requests import JobDefaults, RequestError, parse_body

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
        ({"tools": [{"type": "function"}]}, "tool calling is not supported"),
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
    ],
)
def test_bad_bodies_name_the_field_and_the_fix(body, expected):
    with pytest.raises(RequestError, match=None) as info:
        parse(**body)
    assert expected in str(info.value)


def test_unknown_fields_are_warned_about_not_dropped_silently():
    request = parse(temprature=0.2)
    assert request.warnings == ["body.temprature is not a field the engine knows; it is ignored"]


def test_response_format_json_schema_is_kept_for_structured_output():
    schema = {"type": "object", "properties": {"label": {"type": "string"}}}
    request = parse(response_format={"type": "json_schema", "json_schema": {"schema": schema}})
    assert request.json_schema == schema
    assert parse(response_format={"type": "json_object"}).json_schema == {}
    assert parse(response_format={"type": "text"}).json_schema is None
