"""What the tests split from tests/unit/test_live_progress.py by kind share (docs/tests.md)."""

from __future__ import annotations

import os
import time
from array import array

from core.check.engine_requests import ChatRequest
from core.run.eta import Expected
from core.run.pending import PlannedRequests
from core.schemas import JobStatus


def running_status(**fields) -> JobStatus:
    """A running job whose worker is this (live) process."""
    return JobStatus(state="running", pid=os.getpid(), heartbeat_at=time.time(), **fields)


def expected_of(pending: dict[str, tuple[int, int]]) -> Expected:
    """The progress model's :class:`Expected` of ``custom_id -> (expected tokens, limit)``,
    in run order on one engine (a limit expects the same tokens throughout)."""
    planned = PlannedRequests()
    for line_no, (custom_id, (_, limit)) in enumerate(pending.items(), start=1):
        request = ChatRequest(custom_id=custom_id, messages=[], sampling={"max_tokens": limit})
        planned.add(request, line_no, "/models/m")
    per_answer = {(0, limit): tokens for tokens, limit in pending.values()}
    assert len(per_answer) == len({limit for _, limit in pending.values()}), pending
    return Expected(planned, [array("I", range(len(planned)))], per_answer)
