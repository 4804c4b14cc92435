"""The ETA's model of the engine (core/run/eta.py), against hand-computed cases."""

from __future__ import annotations

import random
from array import array

import pytest

from core.plan.measured import Answer, ModelRecord
from core.run.eta import (
    LengthDraws,
    StepTime,
    StepTimer,
    Waiting,
    remaining_seconds,
    simulate,
)
from tests.support.live_progress import expected_of


def lengths(*answers: Answer) -> LengthDraws:
    return LengthDraws(ModelRecord(answers=list(answers)))


def test_the_step_time_line_is_fitted_from_the_engines_steps() -> None:
    timer = StepTimer(decay=1.0)
    assert timer.fit() is None
    for running in (160, 120, 80, 40, 10, 1):
        timer.add(running, 0.1 + 0.002 * running)
    fit = timer.fit()
    assert fit.base == pytest.approx(0.1) and fit.per_request == pytest.approx(0.002)
    assert fit(50) == pytest.approx(0.2)


def test_the_step_time_follows_the_recent_steps() -> None:
    timer = StepTimer(decay=0.5)
    timer.add(100, 0.4)  # the first, slow steps of a run
    for _ in range(6):
        timer.add(100, 0.2)
    assert timer.fit()(100) == pytest.approx(0.2, rel=0.02)
    # One batch size only: a constant step time, or an earlier run's line rescaled.
    assert timer.fit().per_request == 0
    shaped = timer.fit(StepTime(0.05, 0.001))
    assert shaped(100) == pytest.approx(0.2, rel=0.02) and shaped(10) < shaped(100)


def test_waves_of_requests_through_the_window() -> None:
    # Every answer 10 tokens; 4 requests, 2 at a time, 1 s a step: two waves of 10 steps.
    draws = lengths(Answer(tokens=10, limit=100, truncated=False))
    assert simulate([], [100] * 4, 2, draws, StepTime(1.0, 0.0)) == pytest.approx(20.0)


def test_beside_another_job_a_job_has_the_slots_left_and_every_step_runs_both() -> None:
    # 8 requests of 10 tokens, a window of 8, a step of 0.1 s + 0.01 s a request. Alone:
    # one wave of 10 steps of 8. Beside another job holding 4 slots: two waves of 4 of its
    # own, each step a step of 8 requests.
    draws = lengths(Answer(tokens=10, limit=100, truncated=False))
    step, waiting = StepTime(0.1, 0.01), Waiting(8, (100,) * 8, (100,) * 8)
    alone = remaining_seconds([], waiting, 8, draws, step, tokens_per_s=0.0)
    shared = remaining_seconds([], waiting, 8, draws, step, tokens_per_s=0.0, beside=4)
    assert alone == pytest.approx(10 * step(8))
    assert shared == pytest.approx(20 * step(8))


def test_a_running_request_needs_only_what_it_has_not_written() -> None:
    draws = lengths(Answer(tokens=50, limit=100, truncated=False))
    assert simulate([(5, 100)], [], 8, draws, StepTime(0.5, 0.0)) == pytest.approx(45 * 0.5)


def test_the_longest_answer_sets_the_end_at_a_small_batchs_speed() -> None:
    # Nine requests finishing within 2 steps and one with 60 tokens to go: 62 tokens, so a
    # token count at the full batch's 10 tokens per 0.3 s step says ~2 s; the engine needs
    # 60 steps, 58 of them with one request (0.1 s each).
    answers = [Answer(tokens=62, limit=62, truncated=False)]
    running = [(60, 62)] * 9 + [(2, 62)]
    step = StepTime(0.1, 0.02)  # 0.3 s with 10 running
    seconds = simulate(running, [], 10, lengths(*answers), step)
    assert seconds == pytest.approx(2 * 0.3 + 58 * 0.12)


def test_without_measured_answers_every_answer_reaches_its_limit() -> None:
    draws = lengths()
    assert draws.bound
    assert simulate([(3, 8)], [16], 1, draws, StepTime(1.0, 0.0)) == pytest.approx(5 + 16)


def test_requests_before_the_tail_count_at_the_token_rate(monkeypatch) -> None:
    monkeypatch.setattr("core.run.eta.TAIL", 2)
    draws = lengths(Answer(tokens=10, limit=100, truncated=False))
    # 6 waiting: the first 4 (40 tokens at 20/s = 2 s), then 2 simulated (10 steps of 1 s).
    pending = {f"r{i}": (10, 100 + i) for i in range(7)}  # one in the engine, six waiting
    waiting = expected_of(pending).waiting(admitted=1)
    assert waiting == Waiting(6, (101, 102), (105, 106))  # a count and two ends, no copy
    seconds = remaining_seconds([(1, 100)], waiting, 2, draws, StepTime(1.0, 0.0), 20.0)
    assert seconds == pytest.approx(2.0 + 10.0)


def test_before_the_first_token_the_forecast_says_nothing_yet_without_failing() -> None:
    from core.run.engine import EngineActivity
    from core.run.eta import Forecast

    forecast = Forecast(ModelRecord(), window=4)
    waiting = expected_of({"a": (10, 16), "b": (10, 16)}).waiting(admitted=2)
    prompts = EngineActivity(prompt_tokens=40, running=2, progress=((0, 16), (0, 16)))
    # The heartbeat reads the engine while it is still on the prompts: no tokens, no ETA
    # (this raised IndexError, so the status lost the engine's numbers until tokens came).
    assert forecast.seconds(10.0, prompts, waiting) is None
    assert forecast.seconds(12.0, prompts, waiting) is None


def test_a_run_keeps_its_step_time_for_later_runs_only_where_its_batch_size_varied() -> None:
    from core.run.engine import EngineActivity
    from core.run.eta import Forecast

    def decode(forecast: Forecast, sizes: list[int]) -> None:
        """Readings two seconds apart, each after decode steps of ``sizes`` requests."""
        steps, tokens = 0, 0
        for at, running in enumerate(sizes):
            steps, tokens = steps + 1, tokens + running
            activity = EngineActivity(
                generated_tokens=tokens,
                prompt_tokens=40,
                steps=steps,
                running=running,
                progress=((steps, 80),) * running,
                recent_steps=((steps, running, 0.01 + 0.001 * running),),
            )
            forecast.seconds(2.0 * at, activity, Waiting())

    # Twelve requests all to the same length: one batch size, whose step time says nothing
    # of a hundred requests' (kept, it made the next job's first ETA half the truth).
    steady = Forecast(ModelRecord(), window=256)
    decode(steady, [12] * 8)
    assert steady.step_time() is not None and steady.measured_step_time() is None
    # Answers of their own lengths: the batch thins out, and the line is measured.
    thinning = Forecast(ModelRecord(), window=256)
    decode(thinning, [12, 12, 10, 8, 6, 4, 2, 1])
    line = thinning.measured_step_time()  # the steps' line, scaled by the loop's wall time
    assert line is not None and line.base / line.per_request == pytest.approx(10, rel=0.05)


def planned_of(limits: list[int], folders: list[str] | None = None, n: int = 1):
    """Rows ``r0``, ``r1``... with these limits (and model folders), as the plan keeps them."""
    from core.check.engine_requests import ChatRequest
    from core.run.pending import PlannedRequests

    planned = PlannedRequests()
    for i, limit in enumerate(limits):
        sampling = {"max_tokens": limit, "n": n, "temperature": 1.0}
        request = ChatRequest(custom_id=f"r{i}", messages=[], sampling=sampling)
        planned.add(request, i + 1, folders[i] if folders else "/models/m")
    return planned


def test_the_requests_waiting_follow_run_order_engine_by_engine(monkeypatch) -> None:
    from core.run.eta import Expected

    monkeypatch.setattr("core.run.eta.TAIL", 2)
    planned = planned_of([100 + i for i in range(8)])
    # Two engines: the odd rows' runs first, then the even rows'; each in the file's order.
    engines = [array("I", [1, 3, 5, 7]), array("I", [0, 2, 4, 6])]
    per_answer = {(0, 100 + i): 10 for i in range(8)}
    expected = Expected(planned, engines, per_answer)
    assert expected.waiting(1) == Waiting(7, (103, 105), (104, 106))
    expected.finished("r3")
    expected.finished("r4")
    assert expected.waiting(1) == Waiting(5, (105, 107), (102, 106))
    expected.finished("r1")  # the first in run order: the next scan starts after it
    expected.finished("r6")  # the last: the backward scan too
    assert expected.waiting(0) == Waiting(4, (105, 107), (100, 102))
    assert expected.waiting(4) == Waiting(0) and len(expected) == 4


def test_a_finished_request_is_no_longer_expected_once_and_other_ids_change_nothing() -> None:
    from core.run.eta import Expected

    planned = planned_of([16, 16, 32, 16], ["/models/a", "/models/b", "/models/a", "/models/a"])
    planned.answers[3] = 3  # three answers (n=3): three times the tokens
    per_answer = {(0, 16): 10, (1, 16): 5, (0, 32): 20}  # by model folder and limit
    expected = Expected(planned, [array("I", [0, 1, 3])], per_answer)  # r2 was reused
    assert (len(expected), expected.outstanding) == (3, 10 + 5 + 30)
    for custom_id in ("r2", "nobody", "r1", "r1"):  # reused, unknown, then r1 twice
        expected.finished(custom_id)
    assert (len(expected), expected.outstanding) == (2, 10 + 30)
    expected.finished("r3")
    assert (len(expected), expected.outstanding) == (1, 10)


def test_the_requests_waiting_are_those_a_dict_in_run_order_would_give(monkeypatch) -> None:
    """Against the dict it replaces (custom_id -> (expected tokens, limit), in run order,
    each finished one popped), as requests finish out of order and heartbeats read it."""
    from itertools import islice

    from core.run.eta import Expected

    monkeypatch.setattr("core.run.eta.TAIL", 3)
    rng = random.Random(7)
    limits = [rng.randrange(1, 6) for _ in range(60)]
    planned = planned_of(limits, [rng.choice(["/models/a", "/models/b"]) for _ in limits])
    rows = list(range(60))
    rng.shuffle(rows)
    engines = [array("I", sorted(rows[:25])), array("I", sorted(rows[25:55]))]  # 5 reused
    per_answer = {(f, limit): 2 * limit + f for f in (0, 1) for limit in range(1, 6)}
    expected = Expected(planned, engines, per_answer)
    pending = {
        f"r{row}": (per_answer[planned.folder_nos[row], limits[row]], limits[row])
        for engine in engines
        for row in engine
    }
    finishing = [f"r{row}" for row in range(60)] + ["r0", "other"]
    rng.shuffle(finishing)
    for custom_id in finishing:
        admitted = rng.randrange(0, 8)
        count = max(len(pending) - admitted, 0)
        take = min(count, 3)
        first = tuple(limit for _, limit in islice(pending.values(), admitted, admitted + take))
        last = tuple(limit for _, limit in islice(reversed(pending.values()), take))[::-1]
        assert expected.waiting(admitted) == Waiting(count, first, last)
        assert expected.outstanding == sum(tokens for tokens, _ in pending.values())
        pending.pop(custom_id, None)
        expected.finished(custom_id)
    assert (len(expected), expected.outstanding) == (0, 0)
