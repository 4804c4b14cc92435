"""The one retry policy of every executor: what to do when the engine fails.

- The engine refusing one request (e.g. a prompt longer than the context) fails that
  request alone, as ``engine_rejected``: the same input fails the same way.
- An engine fault is retried up to three times with backoff (1, 2, 4 s); requests that
  already have a result are never run again.
- Running out of memory halves the number of requests inside the engine at once, as
  often as needed, before it counts as a fault.
- Requests still without a result after the last retry fail as ``engine_error`` (500),
  which a later retry of the job may fix.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any, Protocol

from core.check.engine_requests import ChatRequest, EngineRequest, GeneratedRequest, ScoreRequest
from core.check.tools import NAMED, REQUIRED
from core.run.engine import EngineRequestError
from core.run.outputs import Completion, ScoreLayout, ToolCall, error_line, success_line

log = logging.getLogger(__name__)
BACKOFF_SECONDS = (1, 2, 4)


class StreamingEngine(Protocol):
    def stream(
        self, requests: list[EngineRequest], window: int
    ) -> Iterator[list[tuple[EngineRequest, Completion | EngineRequestError]]]: ...


def result_line(request: EngineRequest, model: str, result: Completion | Exception) -> dict:
    """A request's output line: its success, or the engine's refusal of it."""
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
    engine: StreamingEngine, requests: list[EngineRequest], window: int, model: str
) -> Iterator[list[dict[str, Any]]]:
    """Streams one output line per request through ``engine``, by the rules above.

    Args:
        engine: anything with :meth:`core.run.engine.Engine.stream`.
        requests: the requests to run.
        window: how many requests are inside the engine at once (halved on out of memory).
        model: the model name written into output lines.
    """
    remaining, retries = list(requests), 0
    while remaining:
        done: set[str] = set()
        try:
            for batch in engine.stream(remaining, window):
                done.update(request.custom_id for request, _ in batch)
                yield [result_line(r, model, result) for r, result in batch]
            return
        except Exception as exc:
            remaining = [r for r in remaining if r.custom_id not in done]
            if _out_of_memory(exc) and window > 1:
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


def run_chunk(engine: StreamingEngine, chunk: list[EngineRequest], model: str) -> list[dict]:
    """A whole chunk run to the end by the same rules, its lines in the chunk's order
    (for executors that hand out whole chunks, such as a Ray replica)."""
    by_id = {
        line["custom_id"]: line
        for lines in run_with_retries(engine, chunk, max(len(chunk), 1), model)
        for line in lines
    }
    return [by_id[request.custom_id] for request in chunk]
