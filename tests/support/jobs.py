"""The one way tests make a finished job: the real worker runs it, answered by a script.

:func:`finished_job` writes the batch file, creates the job folder as the product does,
and runs :func:`core.run.worker.run_job` on it with a scripted executor in place of the
engine, so ``output.jsonl``, ``errors.jsonl``, ``status.json`` and ``metrics.jsonl`` are
exactly what a real run leaves (hash chains, successes and failures in their own files).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from core.check.engine_requests import EngineRequest
from core.files import write_atomic
from core.jobs.folder import JobFolder, create_job, list_jobs
from core.run import worker
from core.run.outputs import Choice, Completion, Embeddings, error_line, success_line
from core.run.retry import result_line
from core.schemas import EngineConfig, to_json


def request_line(custom_id: str, prompt: str, system: str | None = None, **body: Any) -> str:
    """A chat request line of a batch file (with a system prompt when ``system`` is given)."""
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    body = {"model": "gpt-x", "messages": messages, **body}
    return json.dumps(
        {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body},
        ensure_ascii=False,
    )


class StandIn:
    """What every stand-in executor shares: nothing to load, no engine counters to read,
    a stop flag (a cancel) that its ``run`` may honour, and the run window's gate
    (``admit``, set by the worker) that it may ask before each request, as the engine does."""

    load_seconds, description, stopped, window = 0.0, "on a stand-in", False, 1
    admit = None

    def stop(self) -> None:
        self.stopped = True

    def activity(self) -> None:
        return None


class StandInEngine:
    """Stands in for a loaded engine in the worker's pool (:func:`stand_in_pool`)."""

    load_seconds = 0.0

    def __init__(self, config: EngineConfig) -> None:
        self.config, self.closed = config, False

    def close(self) -> None:
        self.closed = True


def stand_in_pool(monkeypatch: Any) -> dict[str, StandInEngine]:
    """The worker's pool (``core.run.pool.POOL``), emptied, loading stand-in engines with
    room for all: which engines stay loaded is then the pool's and the worker's rule alone.
    Returns the engines it loads, by model folder name."""
    from core.run.pool import POOL

    engines: dict[str, StandInEngine] = {}

    def load(config: EngineConfig) -> StandInEngine:
        engines[config.model_name] = StandInEngine(config)
        return engines[config.model_name]

    monkeypatch.setattr(POOL, "_load", load)
    monkeypatch.setattr(POOL, "_in_use", lambda: 0)
    monkeypatch.setattr(POOL, "_available", lambda: 1 << 40)
    monkeypatch.setattr(POOL, "budget", lambda: None)
    for name, empty in (("held", {}), ("users", {}), ("measured", {}), ("baseline", None)):
        monkeypatch.setattr(POOL, name, empty)
    return engines


class ScriptedExecutor(StandIn):
    """Stands in for the engine: answers each request as its row says.

    A row is ``{custom_id, answer, finish, tokens, prompt_tokens, latency_ms, error}``;
    ``answer`` None makes the request fail with ``error`` (default: engine_rejected). A
    row with ``vectors`` (one per input) answers an embedding model's request.
    """

    def __init__(self, rows: dict[str, dict[str, Any]], model: str) -> None:
        self.rows, self.model = rows, model

    def run(self, requests: list[EngineRequest]) -> Iterator[list[dict]]:
        yield [self.line(request) for request in requests]

    def line(self, request: EngineRequest) -> dict:
        row = self.rows[request.custom_id]
        if row.get("vectors") is not None:  # an embeddings, score or rerank request
            vectors = Embeddings(row.get("prompt_tokens", 5), row["vectors"])
            return result_line(request, self.model, vectors)
        if row.get("answer") is None:
            code, message = row.get("error", ("engine_rejected", "prompt too long"))
            return error_line(request.custom_id, code, message)
        completion = Completion(
            row.get("prompt_tokens", 5),
            [Choice(row["answer"], row.get("finish", "stop"), row.get("tokens", 3))],
            latency_ms=row.get("latency_ms"),
        )
        return result_line(request, self.model, completion)  # a forced tool call included


def finished_job(
    folder: Path,
    rows: dict[str, str | None] | list[dict[str, Any]],
    latencies: dict[str, int] | None = None,
    *,
    model: str | Path = "tiny",
    name: str = "batch.jsonl",
    output_path: str | None = None,
    model_map: dict[str, str] | None = None,
) -> JobFolder:
    """A job run to its end by the real worker, in ``folder/jobs``.

    Args:
        folder: where the batch file and the ``jobs`` folder go.
        rows: ``{custom_id: answer or None}``, or rows as :class:`ScriptedExecutor` reads
            them, with ``prompt``, ``system`` and ``metadata`` for the chat request line,
            or ``request``: the whole request line (any endpoint).
        latencies: ``latency_ms`` for some ids (the others look like lines written before
            the engine timed requests).
        model: the model folder's name (what output lines and the store call the model),
            or the folder itself (a real one: LoRA adapters check their base against it).
        name: the batch file's name.
        output_path: where the results are delivered (an ``s3://`` one by the worker).
        model_map: the job's ``body.model`` names -> model or adapter folders; a row's
            ``model`` is its line's ``body.model`` (an adapter's line then carries the
            adapter's name, as the worker writes it).
    """
    if isinstance(rows, dict):
        rows = [{"custom_id": cid, "answer": answer} for cid, answer in rows.items()]
    latencies = latencies or {}
    by_id = {
        row["custom_id"]: {"latency_ms": latencies.get(row["custom_id"]), **row} for row in rows
    }
    folder.mkdir(parents=True, exist_ok=True)
    batch = folder / name
    lines = []
    for row in rows:
        extra: dict[str, Any] = {"max_tokens": 8, "temperature": 0.2}
        if row.get("metadata"):
            extra["metadata"] = row["metadata"]
        if row.get("model"):
            extra["model"] = row["model"]
        prompt = row.get("prompt", f"prompt {row['custom_id']}")
        if "request" in row:
            lines.append(json.dumps(row["request"]))
        else:
            lines.append(request_line(row["custom_id"], prompt, row.get("system"), **extra))
    batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
    engine = EngineConfig(model=str(model) if isinstance(model, Path) else f"/models/{model}")
    job = create_job(batch, folder / "jobs", engine, output_path=output_path, model_map=model_map)
    executor = ScriptedExecutor(by_id, Path(engine.model).name)
    with mock.patch.object(worker, "make_executor", lambda spec, job_dir: executor):
        worker.run_job(job)
    return job


def rewrite_spec(job: JobFolder, **changes: object) -> None:
    """Changes settings in a job's ``job.json`` (a test's shortcut; jobs never change it)."""
    write_atomic(job.spec_file, to_json(job.read_spec().model_copy(update=changes)))


def embedding_output_line(custom_id: str, vectors: list[Any], encoding: str = "float") -> dict:
    """A /v1/embeddings output line as OpenAI's batch API writes it (``vectors``: one per
    input; ``encoding`` base64 gives each as little-endian float32 bytes)."""
    import base64
    import uuid

    import numpy as np

    def encoded(vector: Any) -> Any:
        if encoding == "base64" and not isinstance(vector, str):
            return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
        return [float(x) for x in vector] if not isinstance(vector, str) else vector

    data = [
        {"object": "embedding", "index": i, "embedding": encoded(v)} for i, v in enumerate(vectors)
    ]
    body = {
        "object": "list",
        "data": data,
        "model": "all-MiniLM-L6-v2",
        "usage": {"prompt_tokens": 5 * len(vectors), "total_tokens": 5 * len(vectors)},
    }
    return {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": {"status_code": 200, "request_id": f"req_{uuid.uuid4().hex}", "body": body},
        "error": None,
    }


def finished_embedding_job(
    folder: Path,
    requests: list[dict[str, Any]],
    *,
    model: str = "/models/all-MiniLM-L6-v2",
    name: str = "embed.jsonl",
) -> JobFolder:
    """A finished /v1/embeddings job, its result lines written as a worker writes them.

    Each request is ``{custom_id, input (a text or a list of them), vectors (one per
    input; or ``line``: the whole output line as it should be), metadata, encoding}``;
    ``vectors`` None makes the request fail (its error line goes to errors.jsonl).
    """
    from core.jobs.output_file import OutputWriter
    from core.schemas import JobStatus

    folder.mkdir(parents=True, exist_ok=True)
    batch = folder / name
    lines = []
    for request in requests:
        body: dict[str, Any] = {"model": "all-MiniLM-L6-v2", "input": request["input"]}
        body["encoding_format"] = request.get("encoding", "float")
        if request.get("metadata"):
            body["metadata"] = request["metadata"]
        line = {"custom_id": request["custom_id"], "method": "POST", "url": "/v1/embeddings"}
        lines.append(json.dumps({**line, "body": body}, ensure_ascii=False))
    batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
    job = create_job(batch, folder / "jobs", EngineConfig(model=model))
    results = []
    for request in requests:
        if "line" in request:
            results.append(request["line"])
        elif request.get("vectors") is None:
            results.append(error_line(request["custom_id"], "engine_rejected", "input too long"))
        else:
            results.append(
                embedding_output_line(
                    request["custom_id"], request["vectors"], request.get("encoding", "float")
                )
            )
    with OutputWriter(job.output) as output, OutputWriter(job.errors) as errors:
        output.write(line for line in results if line.get("error") is None)
        errors.write(line for line in results if line.get("error") is not None)
    failed = sum(line.get("error") is not None for line in results)
    job.write_status(
        JobStatus(
            state="completed",
            total=len(requests),
            done=len(requests),
            succeeded=len(requests) - failed,
            failed=failed,
        )
    )
    return job


def wait_for(job_dir, predicate, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = list_jobs(job_dir)
        if jobs and predicate(jobs[0].read_status()):
            return jobs[0]
        time.sleep(0.3)
    raise AssertionError("timed out waiting for the job")


def monitored_job(studio_home) -> JobFolder:
    """A one-request job in the data folder, for the Monitor to show (status and samples
    written by the test)."""
    studio_home.mkdir()
    batch = studio_home / "b.jsonl"
    batch.write_text(request_line("a", "hi") + "\n")
    return create_job(batch, studio_home / "jobs", EngineConfig(model="/models/tiny"))


class Answers(StandIn):
    """Answers every request the run window's gate lets in, one at a time; counts the
    requests it was given."""

    def __init__(self, text: str = "ok") -> None:
        self.text, self.ran = text, []

    def run(self, requests):
        for request in requests:
            if self.admit is not None and not self.admit():
                return  # the window closed: nothing inside, so nothing more comes
            self.ran.append(request.custom_id)
            completion = Completion(2, [Choice(self.text, "stop", 1)])
            yield [success_line(request.custom_id, "m", completion)]


def make_job(tmp_path: Path, count: int, jobs: Path | None = None):
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(request_line(f"r{i}", "hi") + "\n" for i in range(count)))
    return create_job(batch, jobs or tmp_path / "jobs", EngineConfig(model="/models/none"))


class Dated(StandIn):
    """Answers each request with its prompt (4 prompt, 2 output tokens), dated ``age``
    seconds ago (as answers made long before)."""

    def __init__(self, age: float = 0.0) -> None:
        self.age = age

    def run(self, requests):
        for request in requests:
            text = request.messages[-1]["content"]
            line = success_line(request.custom_id, "tiny", Completion(4, [Choice(text, "stop", 2)]))
            line["response"]["body"]["created"] = int(time.time() - self.age)
            yield [line]


def set_job_seconds(job: JobFolder, seconds: float) -> None:
    """Says the job's engine ran ``seconds`` over all its runs (a run's own time varies)."""
    status = job.read_status()
    status.job_seconds = seconds
    job.write_status(status)


def reused_rerun(
    folder: Path, prompts: dict[str, str], new: dict[str, str], *, seconds: tuple[float, float]
) -> tuple[JobFolder, JobFolder]:
    """A job of greedy ``prompts`` answered two hours ago whose engine ran ``seconds[0]``,
    and its rerun with ``new`` lines added, which reuses those answers and computes the new
    ones in ``seconds[1]`` (both in ``folder/jobs``, on the model ``tiny``)."""
    folder.mkdir(parents=True, exist_ok=True)
    jobs, engine = folder / "jobs", EngineConfig(model="/models/tiny")
    made = []
    for lines, age, took in ((prompts, 7200.0, seconds[0]), ({**prompts, **new}, 0.0, seconds[1])):
        batch = folder / f"batch{len(made)}.jsonl"
        batch.write_text(
            "".join(request_line(c, p, temperature=0) + "\n" for c, p in lines.items())
        )
        job = create_job(batch, jobs, engine, reuse=True)
        executor = Dated(age)
        with mock.patch.object(worker, "make_executor", lambda spec, job_dir, e=executor: e):
            worker.run_job(job)
        set_job_seconds(job, took)
        made.append(job)
    return made[0], made[1]
