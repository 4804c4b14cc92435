"""A judge's batch answered by a scripted executor, and the store its verdicts land in."""

from __future__ import annotations

import json
from unittest import mock

from core.config import data_paths
from core.jobs.folder import JobFolder
from core.run import worker
from core.store.db import Store
from tests.support.jobs import ScriptedExecutor

ROWS = [
    {"custom_id": "a", "answer": "Your refund is on its way.", "system": "Be kind."},
    {"custom_id": "b", "answer": "No.", "metadata": {"topic": "refund"}},
    {"custom_id": "c", "answer": None},  # failed: nothing to judge
    {"custom_id": "d", "answer": "We will call you tomorrow."},
]


def open_store() -> Store:
    db = Store(data_paths().database)
    db.ingest_all(data_paths().jobs)
    return db


def answer_judge(job: JobFolder, answers: dict[str, str | None]) -> None:
    """Runs the judge job to its end with the real worker, each line answered as given."""
    rows = {cid: {"custom_id": cid, "answer": text} for cid, text in answers.items()}
    executor = ScriptedExecutor(rows, "judge-model")
    with mock.patch.object(worker, "make_executor", lambda spec, job_dir: executor):
        worker.run_job(job)


def verdict(v: str, score: int = 3, reason: str = "because") -> str:
    return json.dumps({"verdict": v, "score": score, "reason": reason})


def input_lines(job: JobFolder) -> list[dict]:
    return [json.loads(line) for line in job.input.read_text(encoding="utf-8").splitlines()]
