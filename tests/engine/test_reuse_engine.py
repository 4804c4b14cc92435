"""Reruns on the real engine: only what changed is computed, and every unchanged answer is
exactly the first run's (docs/reuse.md)."""

from __future__ import annotations

import json
import uuid

import pytest

from core.run.outputs import answer_text
from tests.support.cli import cli
from tests.support.warm_engine import started_job

pytestmark = pytest.mark.engine
LINES = 12


def write_batch(path, prompts: dict[str, str], **sampling) -> None:
    rows = [
        {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "m", "messages": [{"role": "user", "content": prompt}],
                  "max_tokens": 12, **sampling}}
        for cid, prompt in prompts.items()
    ]  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def run(path, out, *options):
    result = cli("run", str(path), "-o", str(out), *options)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def answers(path) -> dict[str, dict]:
    return {line["custom_id"]: line for line in map(json.loads, path.read_text().splitlines())}


def test_a_rerun_with_one_line_edited_computes_that_line_and_repeats_the_rest(warm_home, tmp_path):
    tag = uuid.uuid4().hex[:6]  # asked by no earlier test in the shared home
    prompts = {f"q{i}": f"Name a city ({tag}, {i})." for i in range(LINES)}
    first = tmp_path / "first.jsonl"
    write_batch(first, prompts, temperature=0)
    first_job = started_job(run(first, tmp_path / "first.out", "--reuse"), warm_home)
    before = answers(tmp_path / "first.out")
    assert first_job.read_status().run_done == LINES  # nothing to reuse yet

    edited = tmp_path / "edited.jsonl"
    # One line edited, and one line repeated under a new id.
    write_batch(edited, {**prompts, "q3": f"Name a river ({tag}).", "again": prompts["q5"]},
                temperature=0)  # fmt: skip
    result = run(edited, tmp_path / "edited.out", "--reuse")
    job = started_job(result, warm_home)
    assert f"{LINES} answers (92%) came from earlier results" in result.stdout
    status = job.read_status()
    after = answers(tmp_path / "edited.out")
    assert status.run_done == 1  # the edited line alone reached the engine
    assert (status.succeeded, status.reused) == (LINES + 1, LINES)
    for cid in prompts.keys() - {"q3"}:
        assert answer_text(after[cid]) == answer_text(before[cid])
        assert after[cid]["reused_from"] == {"job": first_job.job_id, "custom_id": cid}
        assert after[cid]["id"] != before[cid]["id"]  # a line of its own
    assert answer_text(after["again"]) == answer_text(before["q5"])
    assert "reused_from" not in after["q3"]

    # Off, every request runs on the engine again.
    again = started_job(run(edited, tmp_path / "again.out", "--restart", "--no-reuse"), warm_home)
    assert (again.read_status().run_done, again.read_status().reused) == (LINES + 1, 0)


def test_sampled_requests_are_never_reused(warm_home, tmp_path):
    tag = uuid.uuid4().hex[:6]
    batch = tmp_path / "sampled.jsonl"
    write_batch(batch, {f"s{i}": f"Invent a word ({tag})." for i in range(4)}, temperature=1.0)
    run(batch, tmp_path / "one.out", "--reuse")  # reuse on: the tests turn it off (conftest)
    job = started_job(run(batch, tmp_path / "two.out", "--restart", "--reuse"), warm_home)
    assert (job.read_status().run_done, job.read_status().reused) == (4, 0)
