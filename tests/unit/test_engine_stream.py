"""Engine.stream (core/run/engine.py) over a stand-in for vLLM whose engine core steps on its
own, as a resident worker's does; vLLM is not loaded (its two exceptions are stubbed)."""

import itertools
import sys
import types
from collections import deque

import pytest

from core.check.engine_requests import ChatRequest
from core.run.engine import Engine


class ApartCore:
    """vLLM's ``LLM`` with its engine core in a process of its own: the core steps by
    itself, so a request that reaches it idle is scheduled at once with what else has
    arrived (the first of a batch alone), unless its scheduling sleeps."""

    def __init__(self) -> None:
        self.llm_engine = self
        self.arrived: list[str] = []  # in the core, not scheduled yet
        self.steps: list[list[str]] = []  # what each of the core's steps scheduled
        self.asleep = False
        self.slept = 0
        self.engine: Engine | None = None

    def _schedule(self) -> None:
        if self.arrived and not self.asleep:
            self.steps.append(self.arrived)
            self.arrived = []

    def add_request(self, request_id, engine_input, params, lora_request=None) -> None:
        self.arrived.append(request_id)
        if not self.steps:  # idle: it wakes at this one
            self._schedule()

    def sleep(self, level, mode) -> None:
        assert (level, mode) == (0, "keep")
        self.asleep, self.slept = True, self.slept + 1

    def wake_up(self, tags) -> None:
        assert tags == ["scheduling"]
        self.asleep = False
        self._schedule()

    def step(self) -> list:
        self._schedule()
        self.engine.stopped = True  # the first step is all these tests read
        return []

    def abort_request(self, request_ids) -> None:
        pass

    def get_metrics(self) -> list:
        return [types.SimpleNamespace(name="vllm:generation_tokens", value=0)]


@pytest.fixture
def core(monkeypatch):
    for name, error in (
        ("vllm.exceptions", "VLLMClientError"),
        ("vllm.v1.engine.exceptions", "EngineDeadError"),
    ):
        monkeypatch.setitem(
            sys.modules, name, types.SimpleNamespace(**{error: type(error, (Exception,), {})})
        )
    return ApartCore()


def engine_on(llm: ApartCore, apart: bool) -> Engine:
    engine = Engine.__new__(Engine)  # no model: the stand-in is vLLM
    engine.llm, engine.core_apart, llm.engine = llm, apart, engine
    engine.closed = engine.stopped = engine.pooling = False
    engine.take_out = engine.cpu_threads = engine.first_token_at = None
    engine._ids, engine.steps, engine._held, engine._inside = itertools.count(), 0, 0, {}
    engine.step_log = deque()
    params = types.SimpleNamespace(max_tokens=8)
    engine._engine_requests = lambda request, key: [(key, {"prompt_token_ids": [1]}, params)]
    return engine


def chats(count):
    return [
        ChatRequest(custom_id=f"r{i}", messages=[{"role": "user", "content": "hi"}], sampling={})
        for i in range(count)
    ]


def test_an_idle_engine_whose_core_steps_apart_takes_the_whole_batch_at_its_first_step(core):
    """A resident worker's warm engine ran a 100-line job's first step with 1 request and
    prefilled the other 99 for 5 s behind it: the Monitor read 1 running and a low speed."""
    list(engine_on(core, apart=True).stream(chats(100), window=256))
    assert [len(step) for step in core.steps] == [100]
    assert not core.asleep


def test_an_in_process_core_steps_only_when_asked_and_is_never_put_to_sleep(core):
    core.add_request = lambda request_id, *_, **__: core.arrived.append(request_id)
    list(engine_on(core, apart=False).stream(chats(10), window=256))
    assert [len(step) for step in core.steps] == [10]
    assert core.slept == 0


def test_the_core_schedules_again_when_reading_the_requests_fails(core):
    def failing():
        yield from chats(3)
        raise OSError("the input went away")

    with pytest.raises(OSError):
        list(engine_on(core, apart=True).stream(failing(), window=256))
    assert core.slept == 1 and not core.asleep
