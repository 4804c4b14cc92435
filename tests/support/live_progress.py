"""What the tests split from tests/unit/test_live_progress.py by kind share (docs/tests.md)."""

from __future__ import annotations

import os
import time

from core.schemas import JobStatus


def running_status(**fields) -> JobStatus:
    """A running job whose worker is this (live) process."""
    return JobStatus(state="running", pid=os.getpid(), heartbeat_at=time.time(), **fields)
