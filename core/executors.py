"""Executors run a job's requests and yield result lines as they finish.

The worker owns the job folder (what to run, where lines go, the status); an executor owns
how requests reach an engine. :class:`LocalExecutor` runs one engine in the worker's own
process; a Ray executor (``core/ray_executor.py``) spreads the same engine code over a
cluster. Both yield lists of output lines in the batch output format.

Failure classes decide retries: the engine refusing one request (``engine_rejected``)
fails that request; an engine fault is retried up to three times with backoff (1, 2, 4 s),
halving the chunk when the engine runs out of memory, before its requests fail with
``engine_error``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Protocol

from core.engine import Engine, EngineRequestError
from core.jobs import JobSpec
from core.outputs import Completion, error_line, success_line
from core.requests import EngineRequest

log = logging.getLogger(__name__)
FIRST_CHUNK = 8  # a small first chunk puts the first results on screen quickly
BACKOFF_SECONDS = (1, 2, 4)


class Executor(Protocol):
    load_seconds: float
    description: str

    def run(self, requests: list[EngineRequest]) -> Iterator[list[dict]]:
        """Yields output lines, in batches, until every request has exactly one."""
        ...


def make_executor(spec: JobSpec) -> Executor:
    """The executor a job asks for: a Ray cluster if its spec names one, else local."""
    if spec.ray:
        from core.ray_executor import RayExecutor

        return RayExecutor(spec)
    return LocalExecutor(spec)


def _chunks(requests: list[EngineRequest], size: int) -> Iterator[list[EngineRequest]]:
    start, step = 0, min(FIRST_CHUNK, size)
    while start < len(requests):
        yield requests[start : start + step]
        start, step = start + step, size


def _result_line(request: EngineRequest, model: str, result: Completion | Exception) -> dict:
    if isinstance(result, EngineRequestError):
        return error_line(request.custom_id, "engine_rejected", str(result))
    return success_line(request.custom_id, model, result)


def run_chunk(engine: Engine, chunk: list[EngineRequest], model: str) -> list[dict]:
    """Runs a chunk, retrying engine faults with backoff; returns one line per request."""
    for attempt, pause in enumerate((*BACKOFF_SECONDS, None)):
        try:
            results = engine.run(chunk)
            return [_result_line(r, model, res) for r, res in zip(chunk, results, strict=True)]
        except Exception as exc:
            if "out of memory" in str(exc).lower() and len(chunk) > 1:
                half = len(chunk) // 2
                log.warning("engine out of memory on %d requests: halving", len(chunk))
                return run_chunk(engine, chunk[:half], model) + run_chunk(
                    engine, chunk[half:], model
                )
            if pause is None:
                message = f"engine error after {attempt} retries: {exc!r}"
                return [error_line(r.custom_id, "engine_error", message, 500) for r in chunk]
            log.warning("engine error (%r); retrying in %d s", exc, pause)
            time.sleep(pause)
    raise AssertionError("unreachable")


class LocalExecutor:
    """One engine in this process, fed in chunks."""

    def __init__(self, spec: JobSpec) -> None:
        self.engine = Engine(spec.engine_config)
        self.model = spec.engine_config.model_name
        self.chunk_size = spec.chunk_size
        self.load_seconds = self.engine.load_seconds
        self.description = f"on {self.model}"

    def run(self, requests: list[EngineRequest]) -> Iterator[list[dict]]:
        for chunk in _chunks(requests, self.chunk_size):
            yield run_chunk(self.engine, chunk, self.model)
