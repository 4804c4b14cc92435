"""The one retry policy of every executor: what to do when the engine fails.

- The engine refusing one request (e.g. a prompt longer than the context) fails that
  request alone, as ``engine_rejected``: the same input fails the same way.
- An engine fault is retried up to three times with backoff (1, 2, 4 s); requests that
  already have a result are never run again.
- Running out of memory halves the number of requests inside the engine at once, as
  often as needed, before it counts as a fault.
- An engine whose process ended (:class:`~core.run.engine.EngineDied`) is not retried:
  the requests inside go back to their jobs and the error goes up, for the worker to load
  the model afresh (``core.run.worker``).
- Requests still without a result after the last retry fail as ``engine_error`` (500),
  which a later retry of the job may fix.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Iterable, Iterator
from typing import Any, Protocol

from core.check.engine_requests import ChatRequest, EngineRequest, GeneratedRequest, ScoreRequest
from core.check.tools import NAMED, REQUIRED
from core.run.engine import EngineDied, EngineRequestError
from core.run.outputs import Completion, ScoreLayout, ToolCall, error_line, success_line
from core.run.sharing import Mix

log = logging.getLogger(__name__)
BACKOFF_SECONDS = (1, 2, 4)


class StreamingEngine(Protocol):
    def stream(
        self, requests: Iterable[EngineRequest], window: int
    ) -> Iterator[list[tuple[EngineRequest, Completion | EngineRequestError]]]: ...


def result_line(request: EngineRequest, model: str, result: Completion | Exception) -> dict:
    """A request's output line: its success, or the engine's refusal of it. ``model`` is
    the engine's; a request run with an adapter carries the adapter's name."""
    line = _result_line(request, model, result)
    if request.redacted:  # the answer is to the redacted prompt: the line says so
        line["redacted"] = dict(request.redacted)
    return line


def _result_line(request: EngineRequest, model: str, result: Completion | Exception) -> dict:
    if isinstance(request, GeneratedRequest) and request.adapter is not None:
        model = request.adapter.name
    if isinstance(result, EngineRequestError):
        return error_line(request.custom_id, "engine_rejected", str(result))
    call: ToolCall | ScoreLayout | None = None
    # "auto" calls are read by the engine
    if isinstance(request, ChatRequest) and request.tool_choice in (REQUIRED, NAMED):
        call = ToolCall(request.tool_choice, request.tool_name)
    elif isinstance(request, ScoreRequest):
        call = ScoreLayout(request.queries, request.documents, request.top_n)
    sampling = request.sampling if isinstance(request, GeneratedRequest) else None
    return success_line(request.custom_id, model, result, request.url, sampling, call)


def _out_of_memory(exc: BaseException) -> bool:
    return "out of memory" in str(exc).lower()


def run_with_retries(
    engine: StreamingEngine, requests: Iterable[EngineRequest], window: int, model: str
) -> Iterator[list[dict[str, Any]]]:
    """Streams one output line per request through ``engine``, by the rules above: one
    job alone in a :class:`~core.run.sharing.Mix` (:func:`run_shared`).

    Args:
        engine: anything with :meth:`core.run.engine.Engine.stream`.
        requests: the requests to run.
        window: how many requests are inside the engine at once (halved on out of memory).
        model: the model name written into output lines.
    """
    mix = Mix()
    mix.join(ALONE, requests)
    for _, lines in run_shared(engine, mix, window, model):
        yield lines


ALONE = "alone"  # the one source of a job that has the engine to itself


def run_shared(
    engine: StreamingEngine, mix: Mix, window: int, model: str
) -> Iterator[tuple[Hashable, list[dict[str, Any]]]]:
    """Streams the requests of every job in ``mix`` through ``engine`` by the rules above,
    yielding ``(job, its output lines)`` as they finish: the engine pulls the next request
    from the mix (which job's, by weight) whenever a slot frees. A job cancelled in the
    mix (:meth:`Mix.cancel`) gets nothing more. After a fault the requests that were
    inside go back to their jobs and run again first; none with a result runs twice."""
    retries = 0
    while True:
        try:
            for batch in engine.stream(mix, window):
                by_job: dict[Hashable, list[dict[str, Any]]] = {}
                for request, result in batch:
                    if (job := mix.finished(request)) is not None:  # None: cancelled
                        by_job.setdefault(job, []).append(result_line(request, model, result))
                yield from by_job.items()
            return
        except EngineDied:
            mix.put_back()
            raise
        except Exception as exc:
            mix.put_back()
            if _out_of_memory(exc) and window > 1:
                window //= 2
                log.warning("engine out of memory: %d requests in flight from now", window)
                continue
            if retries == len(BACKOFF_SECONDS):
                message = f"engine error after {retries} retries: {exc!r}"
                for key, left in mix.drain().items():
                    yield key, [error_line(r.custom_id, "engine_error", message, 500) for r in left]
                return
            log.warning("engine error (%r); retrying in %d s", exc, BACKOFF_SECONDS[retries])
            time.sleep(BACKOFF_SECONDS[retries])
            retries += 1


def run_chunk(engine: StreamingEngine, chunk: list[EngineRequest], model: str) -> list[dict]:
    """A whole chunk run to the end by the same rules, its lines in the chunk's order
    (for executors that hand out whole chunks, such as a Ray replica)."""
    by_id = {
        line["custom_id"]: line
        for lines in run_with_retries(engine, chunk, max(len(chunk), 1), model)
        for line in lines
    }
    return [by_id[request.custom_id] for request in chunk]
