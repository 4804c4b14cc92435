"""An experiment in the data folder, its job run to its end by the real worker with a
scripted executor (tests/support/jobs.py): the files the page and the summary read are
exactly what ``core experiment run`` leaves, without an engine."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.config import data_paths
from core.experiments.config import read_plan
from core.experiments.runs import ExperimentState, experiments_dir, grade, lines
from core.files import write_atomic
from core.jobs.folder import create_job
from core.schemas import EngineConfig
from tests.support.jobs import finished_job


def promptfoo_config(tests: list[dict[str, Any]], prompts: list[str], asserts: str = "") -> str:
    """A promptfoo configuration of ``prompts`` against one provider (gpt-4o-mini) over
    ``tests`` (``{"description", "country"}``), each test asserting ``asserts`` (YAML)."""
    out = "description: capitals\nprompts:\n"
    for i, label in enumerate(prompts):  # labels as JSON strings: YAML reads them as text
        out += f"  - id: p{i}\n    label: {json.dumps(label)}\n"
        out += "    raw: 'Capital of {{country}}?'\n"
    out += "providers:\n  - id: openai:chat:gpt-4o-mini\n    label: mini\n"
    out += "    config: {temperature: 0, max_tokens: 16}\n"
    if asserts:
        out += "defaultTest:\n  assert:\n" + asserts
    out += "tests:\n"
    for test in tests:
        out += f"  - description: {json.dumps(test['description'])}\n"
        out += f"    vars: {{country: {json.dumps(test['country'])}}}\n"
    return out


CAPITALS_CHECKS = "    - {type: icontains, value: paris}\n"


def capitals(n: int = 30) -> str:
    """Two prompts, "plain" and "terse", asking France's capital over ``n`` items, each
    checked for Paris (answered by :func:`capitals_answer`)."""
    tests = [{"description": f"item {t}", "country": "France"} for t in range(n)]
    return promptfoo_config(tests, ["plain", "terse"], CAPITALS_CHECKS)


def capitals_answer(cid: str) -> dict[str, Any]:
    """ "plain" answers Paris on items 0-5, "terse" on every item but 29."""
    t, p = int(cid.split(".")[0][1:]), int(cid.split(".")[1][1:])
    paris = t < 6 if p == 0 else t != 29
    return {"answer": "Paris" if paris else "Lyon", "tokens": 4, "latency_ms": 50 + t}


def experiment_in_home(
    model: Path,
    config: str,
    answer: Callable[[str], dict[str, Any]],
    graded: bool = True,
    run: bool = True,
) -> str:
    """An experiment made from ``config`` (a promptfoo configuration), its one job run by
    the worker with ``answer(custom_id)`` as each line's row (``answer``, ``tokens``,
    ``prompt_tokens``, ``latency_ms``, ``error``), then graded; returns its id. ``run``
    False: the job is made and left queued (no worker takes it)."""
    home = data_paths().home
    source = home.parent / "experiment-source" / "promptfooconfig.yaml"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(config, encoding="utf-8")
    plan = read_plan(source, {"gpt-4o-mini": str(model)}, model)
    batch = lines(plan)
    data_paths().jobs.mkdir(parents=True, exist_ok=True)
    if run:
        rows = [
            {"custom_id": x["custom_id"], "request": x, **answer(x["custom_id"])} for x in batch
        ]
        job = finished_job(home.parent / "experiment-build", rows)
        job.path.rename(data_paths().jobs / job.job_id)
    else:
        file = source.parent / "batch.jsonl"
        file.write_text("".join(json.dumps(x) + "\n" for x in batch), encoding="utf-8")
        job = create_job(file, data_paths().jobs, EngineConfig(model=str(model)))
    state = ExperimentState(
        experiment_id=f"exp_{secrets.token_hex(6)}",
        created_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        source=str(source),
        plan=plan,
        job_id=job.job_id,
    )
    folder = experiments_dir(home) / state.experiment_id
    folder.mkdir(parents=True)
    write_atomic(folder / "experiment.yaml", config)
    write_atomic(folder / "state.json", state.model_dump_json(indent=1))
    if graded and run:
        grade(state, home)
    return state.experiment_id
