"""Retry rules of the executors, with a stand-in engine (the real one is in test_faults)."""

import pytest

from core.check.engine_requests import ChatRequest
from core.run import local as executors
from core.run import retry
from core.run.engine import EngineActivity, EngineRequestError
from core.run.outputs import Choice, Completion


class FlakyEngine:
    """Fails in scripted ways, then answers; records the size of each call."""

    def __init__(self, failures=(), oom_above=None, reject=()):
        self.failures = list(failures)
        self.oom_above = oom_above
        self.reject = set(reject)
        self.calls = []

    def stream(self, requests, window):
        requests = list(requests)  # takes every request at once
        self.calls.append(min(window, len(requests)))
        if self.oom_above and window > self.oom_above:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if self.failures:
            raise self.failures.pop(0)
        yield [
            (
                r,
                EngineRequestError("prompt too long")
                if r.custom_id in self.reject
                else Completion(3, [Choice("ok", "stop", 1)]),
            )
            for r in requests
        ]


def requests(count):
    user = [{"role": "user", "content": "x"}]
    return [ChatRequest(custom_id=f"r{i}", messages=user, sampling={}) for i in range(count)]


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(retry, "BACKOFF_SECONDS", (0, 0, 0))


def test_an_engine_fault_is_retried_then_succeeds():
    engine = FlakyEngine(failures=[RuntimeError("step failed"), RuntimeError("again")])
    lines = retry.run_chunk(engine, requests(4), "m")
    assert [line["error"] for line in lines] == [None] * 4
    assert engine.calls == [4, 4, 4]


def test_after_three_retries_the_requests_fail_as_engine_errors():
    engine = FlakyEngine(failures=[RuntimeError("dead")] * 4)
    lines = retry.run_chunk(engine, requests(2), "m")
    assert {line["error"]["code"] for line in lines} == {"engine_error"}
    assert lines[0]["response"]["status_code"] == 500
    assert "after 3 retries" in lines[0]["error"]["message"]


def test_out_of_memory_halves_the_chunk_until_it_fits():
    engine = FlakyEngine(oom_above=2)
    lines = retry.run_chunk(engine, requests(8), "m")
    assert [line["custom_id"] for line in lines] == [f"r{i}" for i in range(8)]
    assert all(line["error"] is None for line in lines)
    assert max(c for c in engine.calls if c <= 2) == 2


def test_a_rejected_request_fails_alone():
    lines = retry.run_chunk(FlakyEngine(reject={"r1"}), requests(3), "m")
    assert [line["error"] and line["error"]["code"] for line in lines] == [
        None, "engine_rejected", None,
    ]  # fmt: skip


class StreamingEngine:
    """Streams answers in pairs; fails in scripted ways after a number of answers."""

    def __init__(self, fail_after=(), oom_window_above=None):
        self.fail_after = list(fail_after)
        self.oom_window_above = oom_window_above
        self.windows = []

    def activity(self, of=None):
        return EngineActivity()

    def stream(self, requests, window):
        requests = list(requests)  # takes every request at once
        self.windows.append(window)
        if self.oom_window_above and window > self.oom_window_above:
            raise RuntimeError("out of memory")
        limit = self.fail_after.pop(0) if self.fail_after else None
        for start in range(0, len(requests), 2):
            if limit is not None and start >= limit:
                raise RuntimeError("engine core died")
            yield [
                (r, Completion(3, [Choice("ok", "stop", 1)])) for r in requests[start : start + 2]
            ]


def local_executor(engine, window=8):
    return executors.LocalExecutor(engine, "m", window)


def test_a_stream_that_fails_midway_resumes_without_running_anything_twice():
    lines = [
        line for batch in local_executor(StreamingEngine([4])).run(requests(10)) for line in batch
    ]
    assert sorted(line["custom_id"] for line in lines) == sorted(f"r{i}" for i in range(10))
    assert all(line["error"] is None for line in lines)


def test_out_of_memory_runs_fewer_requests_at_once():
    engine = StreamingEngine(oom_window_above=2)
    lines = [line for batch in local_executor(engine).run(requests(5)) for line in batch]
    assert len(lines) == 5 and engine.windows == [8, 4, 2]


def test_an_engine_that_keeps_failing_fails_only_what_has_no_result():
    engine = StreamingEngine([2, 0, 0, 0])
    lines = [line for batch in local_executor(engine).run(requests(6)) for line in batch]
    codes = {line["custom_id"]: line["error"] and line["error"]["code"] for line in lines}
    assert codes == {"r0": None, "r1": None, **{f"r{i}": "engine_error" for i in range(2, 6)}}


def test_seeded_requests_run_without_chunked_prefill_on_cpu_only():
    from core.run.engine import fit_to_requests
    from core.run.pending import Planned
    from core.schemas import EngineConfig

    config = EngineConfig(model="/models/m")
    user = [{"role": "user", "content": "x"}]
    seeded = [Planned.of(ChatRequest(custom_id="s", messages=user, sampling={"seed": 3}), 1, "")]
    plain = [Planned.of(r, n, "") for n, r in enumerate(requests(2))]
    assert fit_to_requests(config, plain + seeded, on_gpu=False).enable_chunked_prefill is False
    assert fit_to_requests(config, plain, on_gpu=False) == config
    assert fit_to_requests(config, seeded, on_gpu=True) == config
    chosen = config.model_copy(update={"enable_chunked_prefill": True})
    assert fit_to_requests(chosen, seeded, on_gpu=False) == chosen  # the user's choice stays


def test_an_unseeded_job_runs_on_the_loaded_engine_an_earlier_seeded_job_fitted():
    """The resident worker keeps the engine a seeded job loaded without chunked prefill: an
    unseeded job on the same model runs on it at once, instead of reloading the model."""
    from core.run.engine import fit_to_requests
    from core.run.pending import Planned
    from core.schemas import EngineConfig

    config = EngineConfig(model="/models/m")
    fitted = config.model_copy(update={"enable_chunked_prefill": False})
    other = EngineConfig(model="/models/other", enable_chunked_prefill=False)
    plain = [Planned.of(r, n, "") for n, r in enumerate(requests(2))]
    assert fit_to_requests(config, plain, on_gpu=False, loaded=[fitted]) == fitted
    assert fit_to_requests(config, plain, on_gpu=False, loaded=[other]) == config
    chosen = config.model_copy(update={"enable_chunked_prefill": True})
    assert fit_to_requests(chosen, plain, on_gpu=False, loaded=[fitted]) == chosen
    assert fit_to_requests(config, requests(2), on_gpu=True, loaded=[fitted]) == config
