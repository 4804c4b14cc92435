"""Executors run a job's requests and yield result lines as they finish.

The worker owns the job folder (what to run, where lines go, the status); an executor owns
how requests reach an engine. :class:`LocalExecutor` runs one engine in the worker's own
process; a Ray executor (``core/ray_executor.py``) spreads the same engine code over a
cluster. Both yield lists of output lines in the batch output format.

Failure classes decide retries: the engine refusing one request (``engine_rejected``)
fails that request; an engine fault is retried up to three times with backoff (1, 2, 4 s),
running fewer requests at once when the engine runs out of memory, before the requests
still without a result fail with ``engine_error``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Protocol

from core.engine import Engine, EngineConfig, EngineRequestError
from core.jobs import JobSpec
from core.outputs import Completion, error_line, success_line
from core.requests import EngineRequest

log = logging.getLogger(__name__)
BACKOFF_SECONDS = (1, 2, 4)


class Executor(Protocol):
    load_seconds: float
    description: str

    @property
    def in_flight(self) -> int:
        """Requests running now, whose work a kill would lose."""
        ...

    def run(self, requests: list[EngineRequest]) -> Iterator[list[dict]]:
        """Yields output lines, in batches, until every request has exactly one."""
        ...


def make_executor(spec: JobSpec) -> Executor:
    """The executor a job asks for: a Ray cluster if its spec names one, else local."""
    if spec.ray:
        from core.ray_executor import RayExecutor

        return RayExecutor(spec)
    return LocalExecutor(spec)


def _result_line(request: EngineRequest, model: str, result: Completion | Exception) -> dict:
    if isinstance(result, EngineRequestError):
        return error_line(request.custom_id, "engine_rejected", str(result))
    return success_line(request.custom_id, model, result, request.url)


def run_chunk(engine: Engine, chunk: list[EngineRequest], model: str) -> list[dict]:
    """Runs a chunk to the end, retrying engine faults with backoff; one line per request.

    For executors that hand out whole chunks (a Ray replica); the local executor streams.
    """
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


_loaded: dict[EngineConfig, Engine] = {}  # at most one: the engine this worker holds


def loaded_engine(config: EngineConfig) -> tuple[Engine, float]:
    """The engine for ``config``, kept between jobs; returns it and the seconds spent loading
    (0 when it was already loaded). Another model's engine is released first."""
    if config in _loaded:
        return _loaded[config], 0.0
    for old in list(_loaded):
        _loaded.pop(old).close()
    engine = Engine(config)
    _loaded[config] = engine
    return engine, engine.load_seconds


class LocalExecutor:
    """One engine in this process, fed continuously (no drain between batches)."""

    def __init__(self, spec: JobSpec) -> None:
        self.engine, self.load_seconds = loaded_engine(spec.engine_config)
        self.model = spec.engine_config.model_name
        # As many as the engine runs at once: a finished request is replaced at the next step,
        # so the batch stays full, and a kill loses at most one batch of work.
        self.window = spec.chunk_size or self.engine.max_num_seqs
        self.description = f"on {self.model}, up to {self.window} at a time"

    @property
    def in_flight(self) -> int:
        return self.engine.in_flight

    def run(self, requests: list[EngineRequest]) -> Iterator[list[dict]]:
        remaining, window, retries = list(requests), self.window, 0
        while remaining:
            done: set[str] = set()
            try:
                for batch in self.engine.stream(remaining, window):
                    done.update(request.custom_id for request, _ in batch)
                    yield [_result_line(r, self.model, result) for r, result in batch]
                return
            except Exception as exc:
                remaining = [r for r in remaining if r.custom_id not in done]
                if "out of memory" in str(exc).lower() and window > 1:
                    window //= 2
                    log.warning("engine out of memory: %d requests in flight from now", window)
                    continue
                if retries == len(BACKOFF_SECONDS):
                    message = f"engine error after {retries} retries: {exc!r}"
                    yield [error_line(r.custom_id, "engine_error", message, 500) for r in remaining]
                    return
                log.warning("engine error (%r); retrying in %d s", exc, BACKOFF_SECONDS[retries])
                time.sleep(BACKOFF_SECONDS[retries])
                retries += 1
