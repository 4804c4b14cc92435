"""Tool calls: the check of ``tools`` and tool turns, the output lines, and a sweep of
generated tools lines through the check and the real engine.

A forced call (``tool_choice`` ``required`` or a named function) must come back as
OpenAI's ``message.tool_calls`` whose arguments parse and validate against the function's
schema; every line the check passes must run; every malformed one is refused with its line
number and field before a model loads.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from core.check import check_file
from core.check.requests import parse_body
from core.endpoints import CHAT_URL
from core.run.outputs import Choice, Completion, ToolCall, answer_text, success_line
from core.schemas import JobDefaults
from tests.support.cli import cli
from tests.support.conformance import validate_line
from tests.support.tools import (
    CONVERSATION,
    REFUSED,
    WEATHER,
    _body,
    _write,
    named,
    tool,
    valid_bodies,
)


def test_every_generated_tools_body_is_one_vllm_and_the_check_accept():
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    bodies = valid_bodies()
    for body in bodies:
        ChatCompletionRequest.model_validate(body)  # vLLM's own request model takes it
        request = parse_body("c", body, JobDefaults())
        choice = body["tool_choice"]
        assert request.tool_choice == (None if choice == "none" else request.tool_choice)
        assert (request.json_schema is None) == (choice == "none")


@pytest.mark.parametrize(("body", "param"), REFUSED)
def test_malformed_tools_are_refused_with_line_and_field(tmp_path: Path, body: dict, param: str):
    path = tmp_path / "bad.jsonl"
    _write(path, [_body(), body])  # the malformed line is line 2
    report = check_file(path, JobDefaults())
    [problem] = report.errors
    assert problem.line == 2 and problem.param == param, problem.message
    assert "Traceback" not in problem.message


def test_tool_turns_are_rendered_so_the_model_sees_them():
    request = parse_body(
        "c",
        _body(messages=CONVERSATION, tool_choice="none", tools=[tool("weather", WEATHER)]),
        JobDefaults(),
    )
    roles = [m["role"] for m in request.messages]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    call = json.loads(request.messages[2]["content"])
    assert call == [{"name": "weather", "arguments": {"city": "Rome", "unit": "celsius"}}]
    assert request.messages[3]["content"] == "21 degrees, sunny"


def test_required_with_several_tools_holds_the_answer_to_one_of_them():
    body = _body(
        tools=[tool("weather", WEATHER), tool("empty")],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    schema = parse_body("c", body, JobDefaults()).json_schema
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid([{"name": "empty", "arguments": {}}])
    assert validator.is_valid([{"name": "weather", "arguments": {"city": "X", "unit": "celsius"}}])
    assert not validator.is_valid([{"name": "weather", "arguments": {"city": "X"}}])
    assert not validator.is_valid([{"name": "other", "arguments": {}}])
    assert not validator.is_valid([{"name": "empty", "arguments": {}}] * 2)  # not parallel


def test_a_named_choice_holds_the_answer_to_the_functions_parameters():
    body = _body(tools=[tool("other"), tool("weather", WEATHER)], tool_choice=named("weather"))
    request = parse_body("c", body, JobDefaults())
    assert (request.tool_choice, request.tool_name, request.json_schema) == (
        "function",
        "weather",
        WEATHER,
    )


@pytest.mark.parametrize(
    ("text", "call", "expected"),
    [
        (
            '{"city": "Paris", "unit": "celsius"}',
            ToolCall("function", "weather"),
            [("weather", {"city": "Paris", "unit": "celsius"})],
        ),
        (
            '[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]',
            ToolCall("required"),
            [("a", {}), ("b", {"x": 1})],
        ),
    ],
)
def test_a_forced_call_is_written_as_openais_tool_calls(text: str, call: ToolCall, expected):
    completion = Completion(9, [Choice(text, "stop", 12)])
    line = success_line("c1", "SmolLM2", completion, CHAT_URL, {}, call)
    parsed = validate_line(line, CHAT_URL)  # the SDK's ChatCompletion and vLLM's response
    choice = parsed.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == expected
    assert all(c.id.startswith("call_") and c.type == "function" for c in calls)
    assert len({c.id for c in calls}) == len(calls)
    assert answer_text(line) == calls[0].function.arguments  # what Results shows and grades


@pytest.mark.parametrize(
    ("text", "call", "expected"),
    [
        ('{"city":"Par', ToolCall("function", "weather"), [("weather", '{"city":"Par')]),
        ('[{"name":"weather","arguments":{"city":"Pa', ToolCall("required"),
         [("weather", '{"city":"Pa')]),
        ('[{"name":"a","arguments":{}},{"name":"b","arguments":{"x":[1,', ToolCall("required"),
         [("a", "{}"), ("b", '{"x":[1,')]),
    ],
)  # fmt: skip
def test_a_call_cut_short_is_a_call_with_finish_reason_length(text, call, expected):
    """As OpenAI writes it: the call it began, its arguments the JSON written so far."""
    completion = Completion(9, [Choice(text, "length", 64)])
    line = success_line("c1", "m", completion, CHAT_URL, {}, call)
    choice = validate_line(line, CHAT_URL).choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls]
    assert calls == expected


def test_a_required_call_cut_before_its_name_stays_text():
    completion = Completion(9, [Choice('[{"name":"wea', "length", 4)])
    line = success_line("c1", "m", completion, CHAT_URL, {}, ToolCall("required"))
    choice = validate_line(line, CHAT_URL).choices[0]
    assert choice.finish_reason == "length" and choice.message.tool_calls is None
    assert choice.message.content == '[{"name":"wea'


def test_the_engine_writes_structured_output_as_compact_json():
    """vLLM's default lets a model write any whitespace inside guided JSON; a forced call
    with max_tokens 64 then spent its tokens on newlines. vLLM's own config takes it."""
    from vllm.config.structured_outputs import StructuredOutputsConfig

    from core.run.structured import STRUCTURED_OUTPUTS

    config = StructuredOutputsConfig(**STRUCTURED_OUTPUTS)
    assert config.disable_any_whitespace and config.backend in ("guidance", "xgrammar")
    # as xgrammar: a schema's object has only the properties it names
    assert config.backend == "xgrammar" or config.disable_additional_properties


def test_results_show_and_grade_a_calls_arguments(tmp_path: Path):
    from core.store.db import Store
    from tests.support.jobs import finished_job

    arguments = '{"city": "Paris", "unit": "celsius"}'
    body = _body(tools=[tool("weather", WEATHER)], tool_choice=named("weather"))
    request = {"custom_id": "w", "method": "POST", "url": CHAT_URL, "body": body}
    job = finished_job(tmp_path, [{"custom_id": "w", "answer": arguments, "request": request}])
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    row = store.results(job.job_id).set_index("custom_id").loc["w"]
    assert (row["answer"], row["finish_reason"]) == (arguments, "tool_calls")


def test_a_json_schema_check_grades_a_calls_arguments(tmp_path: Path):
    from core.qa import grading
    from core.qa.rules import load_rules
    from core.store.db import Store
    from tests.support.jobs import finished_job

    body = _body(tools=[tool("weather", WEATHER)], tool_choice=named("weather"))
    rows = [
        {"custom_id": cid, "answer": answer,
         "request": {"custom_id": cid, "method": "POST", "url": CHAT_URL, "body": body}}
        for cid, answer in (("ok", '{"city": "Oslo", "unit": "celsius"}'),
                            ("bad", '{"city": "Oslo", "unit": "kelvin"}'))
    ]  # fmt: skip
    job = finished_job(tmp_path, rows)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    schema = json.dumps(WEATHER)
    grading.grade(
        store,
        [job.job_id],
        load_rules(f"rules:\n  - {{name: args, type: json_schema, schema: {schema}}}"),
    )
    with store.cursor() as cur:
        got = dict(cur.execute("SELECT custom_id, passed[1] FROM rule_outcomes").fetchall())
    assert got == {"ok": True, "bad": False}


def test_cli_build_makes_tool_call_lines_from_a_pasted_schema(tmp_path: Path):
    from core.config import SAMPLE_DATA

    schema, out = tmp_path / "schema.json", tmp_path / "built.jsonl"
    schema.write_text(json.dumps(WEATHER))
    result = cli("build", str(SAMPLE_DATA / "tickets.csv"), "-o", str(out),
                     "--user-template", "{{ subject }}", "--max-tokens", "40",
                     "--tool-schema", str(schema), "--tool-name", "weather")  # fmt: skip
    assert result.returncode == 0, result.stderr
    line = json.loads(out.read_text().splitlines()[0])
    assert line["body"]["tools"][0]["function"]["parameters"] == WEATHER
    assert line["body"]["tool_choice"] == named("weather")
    assert check_file(out, JobDefaults()).errors == []  # the check passes what it built
    schema.write_text('{"type": "objekt"}')
    bad = cli("build", str(SAMPLE_DATA / "tickets.csv"), "-o", str(out),
                  "--user-template", "{{ subject }}", "--tool-schema", str(schema))  # fmt: skip
    assert bad.returncode == 1 and "not a valid JSON Schema" in bad.stderr
    assert "Traceback" not in bad.stderr
