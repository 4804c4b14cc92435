"""Retry rules of the executors, with a stand-in engine (the real one is in test_faults)."""

import pytest

from core import executors
from core.engine import EngineRequestError
from core.outputs import Choice, Completion
from core.requests import EngineRequest


class FlakyEngine:
    """Fails in scripted ways, then answers; records the size of each call."""

    def __init__(self, failures=(), oom_above=None, reject=()):
        self.failures = list(failures)
        self.oom_above = oom_above
        self.reject = set(reject)
        self.calls = []

    def run(self, requests):
        self.calls.append(len(requests))
        if self.oom_above and len(requests) > self.oom_above:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if self.failures:
            raise self.failures.pop(0)
        return [
            EngineRequestError("prompt too long")
            if r.custom_id in self.reject
            else Completion(3, [Choice("ok", "stop", 1)])
            for r in requests
        ]


def requests(count):
    return [EngineRequest(f"r{i}", [{"role": "user", "content": "x"}], {}) for i in range(count)]


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(executors, "BACKOFF_SECONDS", (0, 0, 0))


def test_an_engine_fault_is_retried_then_succeeds():
    engine = FlakyEngine(failures=[RuntimeError("step failed"), RuntimeError("again")])
    lines = executors.run_chunk(engine, requests(4), "m")
    assert [line["error"] for line in lines] == [None] * 4
    assert engine.calls == [4, 4, 4]


def test_after_three_retries_the_requests_fail_as_engine_errors():
    engine = FlakyEngine(failures=[RuntimeError("dead")] * 4)
    lines = executors.run_chunk(engine, requests(2), "m")
    assert {line["error"]["code"] for line in lines} == {"engine_error"}
    assert lines[0]["response"]["status_code"] == 500
    assert "after 3 retries" in lines[0]["error"]["message"]


def test_out_of_memory_halves_the_chunk_until_it_fits():
    engine = FlakyEngine(oom_above=2)
    lines = executors.run_chunk(engine, requests(8), "m")
    assert [line["custom_id"] for line in lines] == [f"r{i}" for i in range(8)]
    assert all(line["error"] is None for line in lines)
    assert max(c for c in engine.calls if c <= 2) == 2


def test_a_rejected_request_fails_alone():
    lines = executors.run_chunk(FlakyEngine(reject={"r1"}), requests(3), "m")
    assert [line["error"] and line["error"]["code"] for line in lines] == [
        None, "engine_rejected", None,
    ]  # fmt: skip
