"""``tool_choice`` ``"auto"``: the model decides whether to call a tool. It runs where the
model folder's chat template renders the tools and a vLLM tool parser reads the model's
call syntax; elsewhere (the built-in SmolLM2, whose template ignores tools) every entry
point refuses the line with that reason, by line and field, before a model loads.

The runnable folder here is the built-in SmolLM2 with a Hermes (Qwen2.5-style) tool
template beside its weights: the same model, told of the tools, read by vLLM's ``hermes``
parser.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from core.check import check_file
from core.check.requests import parse_body
from core.check.tool_support import auto_support
from core.config import data_paths
from core.endpoints import CHAT_URL
from core.jobs.inbox import process_file
from core.run.outputs import Choice, Completion, success_line
from core.schemas import JobDefaults
from tests.support.api import batch_file, sdk
from tests.support.cli import cli
from tests.support.conformance import validate_line
from tests.support.tool_auto import TOOLS, auto_line


def test_auto_and_no_choice_parse_as_auto_and_vllm_takes_the_body():
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    for choice in ("auto", None):
        body = json.loads(auto_line("a", choice))["body"]
        ChatCompletionRequest.model_validate(body)
        request = parse_body("a", body, JobDefaults())
        assert (request.tool_choice, request.tools, request.json_schema) == ("auto", TOOLS, None)


def test_the_built_in_model_cannot_decide_a_call_and_a_tools_template_can(
    default_model: Path, hermes_model: Path
):
    smol = auto_support(str(default_model))
    assert smol.parser is None and "does not render tools" in smol.reason
    assert auto_support(str(hermes_model)).parser == "hermes"


def _refused_auto(problems: list[Any]) -> None:
    """Lines 2 and 3 (auto, and tools with no choice) refused for the same reason."""
    assert [(p.line, p.param) for p in problems] == [
        (2, "body.tool_choice"),
        (3, "body.tool_choice"),
    ]
    assert all("does not render tools" in p.message for p in problems)


def test_every_entry_point_refuses_auto_on_the_built_in_model_with_the_reason(
    default_model: Path,
    studio_home: Path,
    tmp_path: Path,
    api,
    keys,
    no_worker,
):
    lines = [auto_line("a", "none"), auto_line("b"), auto_line("c", None)]
    path = tmp_path / "auto.jsonl"
    path.write_text("\n".join(lines) + "\n")
    # The app's check (Upload & check, Build) and core check.
    _refused_auto(check_file(path, JobDefaults(), model_folder=default_model).errors)
    checked = cli("check", str(path), "--json")
    assert checked.returncode != 0
    problems = json.loads(checked.stdout)["problems"]
    assert [(e["line"], e["param"]) for e in problems if e["severity"] == "error"] == [
        (2, "body.tool_choice"),
        (3, "body.tool_choice"),
    ]
    # The inbox: refused, with the report beside the file; no job.
    paths = data_paths()
    dropped = paths.inbox / "auto.jsonl"
    shutil.copy(path, dropped)
    assert process_file(dropped, paths, str(default_model)) is None
    report = next(p for p in (paths.inbox / "rejected").rglob("*.json"))
    assert "does not render tools" in report.read_text()
    # The Batch API: the batch fails at validation naming each line.
    client = sdk(api, keys["alice"])
    file = client.files.create(file=("auto.jsonl", batch_file(*lines)), purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint=CHAT_URL, completion_window="24h")
    assert batch.status == "failed"
    assert [(e.line, e.param) for e in batch.errors.data] == [
        (2, "body.tool_choice"),
        (3, "body.tool_choice"),
    ]
    assert not no_worker


def test_the_structure_only_check_judges_auto_by_the_model_or_says_it_was_not_checked(
    default_model: Path,
    hermes_model: Path,
    studio_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    from core.check.model_fit import AUTO_UNCHECKED

    path = tmp_path / "auto.jsonl"
    path.write_text("\n".join([auto_line("a", "none"), auto_line("b"), auto_line("c", None)]))
    counted = check_file(path, JobDefaults(), model_folder=default_model).errors

    # core check --no-tokens on the built-in model: refused for the counting check's reason.
    checked = cli("check", str(path), "--json", "--no-tokens")
    assert checked.returncode != 0
    report = json.loads(checked.stdout)
    errors = [p for p in report["problems"] if p["severity"] == "error"]
    assert [(e["line"], e["param"], e["message"]) for e in errors] == [
        (p.line, p.param, p.message) for p in counted
    ]
    assert not report["tokens_counted"]
    # A name mapped to a model whose template renders tools: the same lines pass.
    checked = cli("check", str(path), "--json", "--no-tokens", "--map", f"m={hermes_model}")
    assert checked.returncode == 0, checked.stdout[-2000:]
    # No model at all (the built-in one not prepared): not refused, but said unchecked.
    monkeypatch.setenv("BATCH_STUDIO_MODELS", str(tmp_path / "no-models"))
    checked = cli("check", str(path), "--no-tokens")
    assert checked.returncode == 0, checked.stdout[-2000:]
    assert checked.stdout.count("'auto' was not checked") == 2
    unchecked_report = check_file(path, JobDefaults(), count_tokens=False)
    unchecked = [p for p in unchecked_report.problems if p.param == "body.tool_choice"]
    assert [(p.line, p.param, p.message) for p in unchecked] == [
        (2, "body.tool_choice", AUTO_UNCHECKED),
        (3, "body.tool_choice", AUTO_UNCHECKED),
    ]


def test_an_auto_line_on_a_tools_template_passes_and_its_tools_are_counted(
    default_model: Path, hermes_model: Path, tmp_path: Path
):
    path = tmp_path / "auto.jsonl"
    path.write_text(auto_line("a") + "\n" + auto_line("b", "none") + "\n")
    report = check_file(path, JobDefaults(), model_folder=hermes_model)
    assert report.ok and not report.errors
    # The tools are part of the auto prompt: it has more tokens than the same chat without.
    none_tokens = report.prompt_tokens - report.prompt_tokens_max
    assert report.prompt_tokens_max > none_tokens + 50


def test_a_parsed_auto_call_is_written_as_openais_tool_calls():
    calls = [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    completion = Completion(9, [Choice("", "stop", 12, calls=calls)])
    line = success_line("c1", "m", completion, CHAT_URL, {})
    choice = validate_line(line, CHAT_URL).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather",
        {"city": "Paris"},
    )


def test_the_hermes_parser_keeps_only_calls_of_a_tool_with_valid_arguments(hermes_model: Path):
    from transformers import AutoTokenizer

    from core.run.tool_parsing import read_calls

    tokenizer = AutoTokenizer.from_pretrained(hermes_model)
    call = '{"name": "get_weather", "arguments": {"city": "Rome"}}'
    good = f"Let me look.<tool_call>\n{call}\n</tool_call>"
    calls, content = read_calls("hermes", tokenizer, good, TOOLS)
    assert calls == [{"name": "get_weather", "arguments": '{"city": "Rome"}'}]
    assert content == "Let me look."
    for bad in (
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',  # no such tool
        '<tool_call>\n{"name": "get_weather", "arguments": {"town": 1}}\n</tool_call>',
        "It is sunny.",
    ):
        assert read_calls("hermes", tokenizer, bad, TOOLS) is None
