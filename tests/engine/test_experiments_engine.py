"""An experiment on the real engine (issue 43): a promptfoo configuration of 2 prompts x
1 provider x 3 tests runs as one job on the warm worker, and the exported matrix holds
each line's answer as the job's output file wrote it."""

from __future__ import annotations

import csv
import json

import pytest

from core.experiments.runs import read_state
from core.jobs.folder import JobFolder
from tests.support.cli import cli

pytestmark = pytest.mark.engine

CONFIG = """\
prompts:
  - "Say the word {{word}}."
  - id: echo
    label: echo
    raw: "Repeat after me: {{word}}"
providers:
  - id: openai:chat:gpt-4o-mini
    config: {temperature: 0, max_tokens: 8}
tests:
  - {description: cat, vars: {word: cat}, assert: [{type: icontains, value: cat}]}
  - {description: dog, vars: {word: dog}, assert: [{type: icontains, value: dog}]}
  - {vars: {word: sun}, assert: [{type: not-contains, value: "=SUM"}]}
"""


def test_a_promptfoo_config_runs_as_one_job_and_exports_its_answers(
    warm_home, tmp_path, default_model
):
    path = tmp_path / "promptfooconfig.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    done = cli("experiment", "run", str(path), "--map", f"gpt-4o-mini={default_model}")
    assert done.returncode == 0, done.stderr
    experiment_id = done.stdout.strip().splitlines()[0]
    job = JobFolder(warm_home / "jobs" / str(read_state(experiment_id).job_id))
    answers = {}
    for raw in job.output.read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        answers[line["custom_id"]] = line["response"]["body"]["choices"][0]["message"]["content"]
    assert sorted(answers) == [f"t{t}.p{p}.m0" for t in range(3) for p in range(2)]
    out = tmp_path / "matrix.csv"
    assert cli("experiment", "export", experiment_id, "-o", str(out)).returncode == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [(r["test"], r["prompt"]) for r in rows] == [
        (t, p) for t in ("cat", "dog", "3") for p in ("Say the word {{word}}.", "echo")
    ]
    for row, cid in zip(rows, sorted(answers), strict=True):
        answer = answers[cid]
        expected = "'" + answer if answer[:1] in ("=", "+", "-", "@", "\t", "\r") else answer
        assert row["output"] == expected
        word = row["word"]
        if row["test"] != "3":
            assert row[f"icontains: {word}"] == str(word in answer.lower()).lower()
            assert row["pass"] == row[f"icontains: {word}"]
