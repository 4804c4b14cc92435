"""Experiments (issue 43): both file formats read into one plan, promptfoo's assertions
with promptfoo's meaning, refusals with their lines before anything runs, and the CLI's
run / grade / export over a job's output file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from core.experiments import assertions as A
from core.experiments.config import ExperimentError, model_name, read_plan
from core.jobs.folder import JobFolder
from tests.support.cli import cli

PROMPTFOO = """\
description: capitals
prompts:
  - "Name the capital of {{country}}."
  - id: short
    label: terse
    raw: "Capital of {{country}}? One word."
providers:
  - id: openai:chat:gpt-4o-mini
    label: mini
    config: {temperature: 0, max_tokens: 16, seed: 1}
defaultTest:
  assert:
    - type: not-icontains
      value: sorry
tests:
  - description: france
    vars: {country: France}
    assert:
      - type: icontains
        value: paris
  - vars: {country: Japan}
    assert:
      - type: contains-any
        value: Tokyo, tokyo
"""


@pytest.fixture
def folder(tmp_path: Path, model: Path) -> Path:
    (tmp_path / "exp").mkdir()
    return tmp_path / "exp"


def plan_of(folder: Path, text: str, model: Path, **kw):
    path = folder / "promptfooconfig.yaml"
    path.write_text(text, encoding="utf-8")
    return read_plan(path, kw.get("model_map", {}), model)


def refusal(folder: Path, text: str, model: Path, **kw) -> list[str]:
    with pytest.raises(ExperimentError) as caught:
        plan_of(folder, text, model, **kw)
    return caught.value.problems


def test_a_promptfoo_configuration_reads_as_tests_prompts_and_providers(folder, model):
    plan = plan_of(folder, PROMPTFOO, model, model_map={"gpt-4o-mini": str(model)})
    assert [p.name for p in plan.prompts] == ["Name the capital of {{country}}.", "terse"]
    provider = plan.providers[0]
    assert (provider.name, provider.model, provider.folder) == ("mini", "gpt-4o-mini", str(model))
    assert (provider.temperature, provider.max_tokens, provider.seed) == (0, 16, 1)
    assert [t.description for t in plan.tests] == ["france", None]
    # defaultTest's assertions come first in every test
    assert [a.type for a in plan.tests[0].asserts] == ["not-icontains", "icontains"]
    assert plan.cells == [(0, 0), (1, 0)]


def test_the_studio_file_reads_a_table_with_a_grid(folder, model):
    (folder / "items.csv").write_text("id,question\n1,Hi?\n2,Bye?\n", encoding="utf-8")
    path = folder / "exp.yaml"
    path.write_text(
        "dataset: items.csv\nprompts: ['Q: {{question}}']\nsystem_prompts: [Be brief., Be kind.]\n"
        "params: {temperature: [0, 0.7]}\nrules:\n  - {name: short, type: length, max: 20}\n",
        encoding="utf-8",
    )
    plan = read_plan(path, {}, model)
    assert len(plan.tests) == 2 and len(plan.prompts) == 2 and len(plan.providers) == 2
    assert len(plan.cells) == 4  # 2 system prompts x 2 temperatures
    assert [p.temperature for p in plan.providers] == [0, 0.7]
    assert plan.rules.names == ["short"]


def test_provider_ids_name_their_model():
    assert model_name("openai:chat:gpt-4o-mini") == "gpt-4o-mini"
    assert model_name("openai:gpt-4o") == "gpt-4o"
    assert model_name("anthropic:messages:claude-3-5-haiku") == "claude-3-5-haiku"


@pytest.mark.parametrize(
    ("kind", "output", "value", "expected"),
    [
        ("equals", "Paris", "Paris", True),
        ("equals", "Paris ", "Paris", False),  # no trimming
        ("equals", "42", 42, True),  # promptfoo's ==
        ("equals", '{"a": 1}', {"a": 1}, True),  # an object: deep equality with the JSON
        ("contains", "in Paris!", "Paris", True),
        ("contains", "in paris!", "Paris", False),
        ("icontains", "in PARIS!", "paris", True),
        ("contains-any", "a cat", "dog, cat", True),
        ("contains-any", "a cow", ["dog", "cat"], False),
        ("icontains-any", "A CAT", ["dog", "cat"], True),
        ("contains-all", "dog and cat", "dog,cat", True),
        ("contains-all", "dog", ["dog", "cat"], False),
        ("icontains-all", "DOG and Cat", ["dog", "cat"], True),
        ("starts-with", "Yes, sure", "Yes", True),
        ("starts-with", " Yes", "Yes", False),
        ("regex", "order 1234", r"\d{4}", True),
        ("regex", "order", r"\d{4}", False),
        ("is-json", '{"a": [1, 2]}', None, True),
        ("is-json", "Here: {}", None, False),
        ("is-json", '{"a": 1}', {"type": "object", "required": ["b"]}, False),
        ("contains-json", 'Here it is: {"a": 1} done', None, True),
        ("contains-json", "no json here", None, False),
        ("contains-json", 'x {"b": 2}', {"type": "object", "required": ["b"]}, True),
        ("levenshtein", "kitten", "sitting", True),  # 3 edits, within the default 5
    ],
)
def test_each_assertion_has_promptfoos_meaning_and_its_not_form_the_opposite(
    kind, output, value, expected
):
    assert A.grade(kind, output, value) is expected
    assert A.grade(f"not-{kind}", output, value) is (not expected)


def test_levenshtein_takes_its_threshold():
    assert A.levenshtein("kitten", "sitting") == 3
    assert A.grade("levenshtein", "kitten", "sitting", threshold=2) is False
    assert A.grade("not-levenshtein", "kitten", "sitting", threshold=2) is True


def test_model_graded_assertions_wait_for_their_model():
    assert A.grade("llm-rubric", "anything", "is polite") is None
    assert A.grade("similar", "anything", "something") is None


def test_code_and_unknown_assertions_are_refused_by_name_with_their_line(folder, model):
    text = PROMPTFOO.replace("type: icontains\n", "type: javascript\n").replace(
        "type: contains-any", "type: contains-sometimes"
    )
    problems = refusal(folder, text, model)
    assert any(p.startswith("line 19:") and "'javascript' runs code" in p for p in problems)
    assert any(p.startswith("line 23:") and "unknown assertion type" in p for p in problems)


def test_a_variable_the_tests_lack_is_named_with_its_line(folder, model):
    text = PROMPTFOO.replace("{{country}}? One word.", "{{country}} in {{year}}?")
    problems = refusal(folder, text, model)
    assert len(problems) == 1
    assert problems[0].startswith("line 4:") and "reads year" in problems[0]
    assert "france (line 16) lacks" in problems[0]


def test_a_provider_without_a_local_model_is_refused(folder, tmp_path):
    problems = refusal(folder, PROMPTFOO, tmp_path / "no-model")
    assert problems[0].startswith("line 8:") and "no local model" in problems[0]
    assert "--map gpt-4o-mini=FOLDER" in problems[0]
    problems = refusal(
        folder, PROMPTFOO.replace("openai:chat:gpt-4o-mini", "exec:./run.sh"), tmp_path
    )
    assert problems[0].startswith("line 8:") and "runs code" in problems[0]


def test_a_file_path_outside_the_experiments_folder_is_refused(folder, model):
    (folder.parent / "secret.txt").write_text("top secret", encoding="utf-8")
    (folder / "p.txt").write_text("Say {{country}}", encoding="utf-8")
    plan = plan_of(
        folder, PROMPTFOO.replace('"Name the capital of {{country}}."', "file://p.txt"), model
    )
    assert plan.prompts[0].messages == [("user", "Say {{country}}")]
    problems = refusal(
        folder,
        PROMPTFOO.replace('"Name the capital of {{country}}."', "file://../secret.txt"),
        model,
    )
    assert problems == [
        f"line 3: file://../secret.txt lies outside the experiment's folder ({folder})"
    ]


def test_a_yaml_bomb_is_refused_quickly(folder, model):
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for k in "bcdefghi":
        prev = chr(ord(k) - 1)
        bomb += f"{k}: &{k} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    # Refused while composing, before a billion values are built (the message says why).
    problems = refusal(folder, bomb + PROMPTFOO, model)
    assert "aliases expand past" in problems[0] and problems[0].startswith("line ")


def test_experiment_run_makes_one_job_of_every_cell_and_export_writes_the_matrix(
    folder, model, tmp_path, monkeypatch, no_worker
):
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(tmp_path / "home"))
    path = folder / "promptfooconfig.yaml"
    path.write_text(PROMPTFOO, encoding="utf-8")
    done = cli("experiment", "run", str(path), "--map", f"gpt-4o-mini={model}", "--no-wait")
    assert done.returncode == 0, done.stderr
    experiment_id = done.stdout.strip()
    assert experiment_id.startswith("exp_")
    assert len(no_worker) == 1  # one job for the whole experiment
    job = JobFolder(no_worker[0].path)
    lines = [json.loads(x) for x in job.input.read_text().splitlines()]
    assert [x["custom_id"] for x in lines] == ["t0.p0.m0", "t0.p1.m0", "t1.p0.m0", "t1.p1.m0"]
    assert lines[1]["body"]["messages"] == [
        {"role": "user", "content": "Capital of France? One word."}
    ]
    assert lines[0]["body"]["model"] == "gpt-4o-mini" and lines[0]["body"]["seed"] == 1
    # What the engine would write: answers for three lines, an error for the fourth.
    answers = {
        "t0.p0.m0": "It is Paris.",
        "t0.p1.m0": "=cmd|' /C calc'!A0",
        "t1.p0.m0": "Sorry, Tokyo",
    }
    body = {"choices": [{"message": {"content": ""}, "finish_reason": "stop"}]}

    def line(cid: str, text: str) -> str:
        body["choices"][0]["message"]["content"] = text
        return json.dumps({"custom_id": cid, "response": {"status_code": 200, "body": body}})

    job.output.write_text("".join(line(c, a) + "\n" for c, a in answers.items()))
    job.errors.write_text(
        json.dumps({"custom_id": "t1.p1.m0", "error": {"message": "boom"}}) + "\n"
    )
    assert cli("experiment", "grade", experiment_id).returncode == 0
    out = tmp_path / "matrix.csv"
    done = cli("experiment", "export", experiment_id, "-o", str(out))
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    checks = ["not-icontains: sorry", "icontains: paris", "contains-any: Tokyo, tokyo"]
    assert list(rows[0]) == ["test", "prompt", "provider", "country", "output", "pass", *checks]
    assert [(r["test"], r["prompt"], r["provider"]) for r in rows] == [
        ("france", "Name the capital of {{country}}.", "mini"), ("france", "terse", "mini"),
        ("2", "Name the capital of {{country}}.", "mini"), ("2", "terse", "mini"),
    ]  # fmt: skip
    assert rows[0]["pass"] == "true" and rows[0]["icontains: paris"] == "true"
    assert rows[1]["output"] == "'=cmd|' /C calc'!A0"  # inert in a spreadsheet
    assert rows[1]["pass"] == "false"
    assert rows[2]["pass"] == "false" and rows[2]["not-icontains: sorry"] == "false"
    assert rows[2]["contains-any: Tokyo, tokyo"] == "true"
    assert rows[3]["output"] == "" and rows[3]["pass"] == ""  # the request failed
    done = cli("experiment", "export", experiment_id, "-o", str(tmp_path / "matrix.parquet"))
    assert done.returncode == 0, done.stderr
    parquet = pd.read_parquet(tmp_path / "matrix.parquet")
    assert parquet["pass"].tolist()[:3] == [True, False, False]  # typed, not text
    done = cli("experiment", "export", experiment_id, "-o", str(tmp_path / "matrix.txt"))
    assert done.returncode != 0 and ".csv, .parquet or .xlsx" in done.stderr


def test_a_refused_experiment_starts_nothing(folder, model, tmp_path, monkeypatch, no_worker):
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(tmp_path / "home"))
    path = folder / "promptfooconfig.yaml"
    path.write_text(PROMPTFOO.replace("type: icontains\n", "type: python\n"), encoding="utf-8")
    done = cli("experiment", "run", str(path), "--map", f"gpt-4o-mini={model}")
    assert (
        done.returncode == 1 and "line 19:" in done.stderr and "'python' runs code" in done.stderr
    )
    assert no_worker == [] and done.stdout == ""
    assert not (tmp_path / "home" / "experiments").exists()
