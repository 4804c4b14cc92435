"""Job folders built by hand, for tests of the parts that read them (no engine)."""

from __future__ import annotations

import json
from pathlib import Path

from core.files import write_atomic
from core.jobs.folder import JobFolder, create_job
from core.jobs.output_file import OutputWriter
from core.run.outputs import Choice, Completion, error_line, success_line
from core.schemas import EngineConfig, JobStatus, to_json


def request_line(custom_id: str, prompt: str) -> str:
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}
    return json.dumps(
        {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body},
        ensure_ascii=False,
    )


def finished_job(
    tmp_path: Path, answers: dict[str, str | None], latencies: dict[str, int] | None = None
) -> JobFolder:
    """A completed job: each id's answer, or ``None`` for a failed request; ``latencies``
    gives some ids a ``latency_ms`` (the others look like lines from before it existed)."""
    latencies = latencies or {}
    tmp_path.mkdir(parents=True, exist_ok=True)
    batch = tmp_path / "batch.jsonl"
    batch.write_text("\n".join(request_line(cid, f"prompt {cid}") for cid in answers) + "\n")
    job = create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/tiny"))
    lines = [
        success_line(
            cid, "tiny", Completion(5, [Choice(answer, "stop", 3)], latency_ms=latencies.get(cid))
        )
        if answer is not None
        else error_line(cid, "engine_rejected", "prompt too long")
        for cid, answer in answers.items()
    ]
    with OutputWriter(job.output) as output, OutputWriter(job.errors) as errors:
        output.write(line for line in lines if line["error"] is None)
        errors.write(line for line in lines if line["error"] is not None)
    failed = sum(a is None for a in answers.values())
    job.write_status(
        JobStatus(
            state="completed",
            total=len(answers),
            done=len(answers),
            succeeded=len(answers) - failed,
            failed=failed,
        )
    )
    return job


def rewrite_spec(job: JobFolder, **changes: object) -> None:
    """Changes settings in a job's ``job.json`` (a test's shortcut; jobs never change it)."""
    write_atomic(job.spec_file, to_json(job.read_spec().model_copy(update=changes)))
