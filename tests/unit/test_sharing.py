"""Jobs side by side on one engine: who enters the engine next, and whose result is whose
(core/run/sharing.py, core/run/retry.py's run_shared and core/run/feed.py, over stand-in
engines that step as Engine.stream does)."""

import gc
import itertools
import threading
import time
import weakref

import pytest

from core.check.engine_requests import ChatRequest
from core.run import retry, sharing
from core.run.engine import EngineActivity, EngineDied, EngineRequestError
from core.run.feed import Feed, feed_of
from core.run.local import LocalExecutor
from core.run.outputs import Choice, Completion
from core.run.sharing import Mix


def job(name, count):
    """``count`` chat requests of job ``name`` (custom ids r0.. as every job has them; the
    prompt says whose it is)."""
    return [
        ChatRequest(
            custom_id=f"r{i}", messages=[{"role": "user", "content": f"{name}{i}"}], sampling={}
        )
        for i in range(count)
    ]


def who(request):
    return request.messages[-1]["content"]


def take(mix, count):
    return [who(r) for r in itertools.islice(mix, count)]


def test_two_jobs_of_equal_weight_alternate():
    mix = Mix()
    mix.join("a", job("a", 3))
    mix.join("b", job("b", 3))
    assert take(mix, 10) == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_priority_raises_a_jobs_share():
    mix = Mix()
    mix.join("a", job("a", 100), priority=2.0)
    mix.join("b", job("b", 100))
    first = take(mix, 30)
    assert sum(name.startswith("a") for name in first) == 20


def test_each_owner_has_an_equal_share_whatever_their_number_of_jobs():
    mix = Mix()
    mix.join("a1", job("a1-", 100), owner="alice")
    mix.join("a2", job("a2-", 100), owner="alice")
    mix.join("b", job("b", 100), owner="bob")
    first = take(mix, 40)
    assert sum(name.startswith("b") for name in first) == 20
    assert sum(name.startswith("a1-") for name in first) == 10


def test_a_job_that_joins_later_gets_the_next_free_slot_then_its_share():
    mix = Mix()
    mix.join("big", job("big", 100))
    assert take(mix, 5) == ["big0", "big1", "big2", "big3", "big4"]
    mix.join("small", job("small", 3))
    assert take(mix, 8) == ["small0", "big5", "small1", "big6", "small2", "big7", "big8", "big9"]


def test_a_job_joining_a_full_engine_claims_its_slots_from_the_youngest_requests():
    mix = Mix()
    mix.join("big", job("big", 100))
    assert take(mix, 8) == [f"big{i}" for i in range(8)]  # a full engine: window 8
    mix.join("small", job("small", 2), owner="bob", size=2)
    assert [who(r) for r in mix.preempt(8)] == ["big7", "big6"]  # the fewest tokens lost
    assert mix.preempt(8) == []  # claimed once
    # the freed slots go to the claimant, then the taken-out requests run again, first
    assert take(mix, 5) == ["small0", "small1", "big6", "big7", "big8"]


def test_a_large_job_joining_claims_its_weights_share_of_the_window():
    mix = Mix()
    mix.join("big", job("big", 100))
    take(mix, 8)
    mix.join("other", job("other", 100), owner="bob", size=100)
    assert sorted(who(r) for r in mix.preempt(8)) == ["big4", "big5", "big6", "big7"]
    assert take(mix, 4) == ["other0", "other1", "other2", "other3"]


def test_free_slots_and_jobs_within_their_share_are_not_taken_from():
    mix = Mix()
    mix.join("a", job("a", 100))
    mix.join("b", job("b", 100), owner="bob")
    inside = list(itertools.islice(mix, 8))  # a0 b0 a1 b1 a2 b2 a3 b3
    for request in inside[3:6]:  # b1 a2 b2 finish: 3 of 8 slots free
        mix.finished(request)
    mix.join("c", job("c", 100), owner="carol", size=100)
    assert mix.preempt(8) == []  # the free slots cover c's share (8 / 3)
    assert take(mix, 3) == ["c0", "a4", "b4"]  # a holds 4 of 8 now, b 3, c 1
    mix.join("d", job("d", 2), owner="dave", size=2)
    # four jobs: a share of 2 slots each. a and b hold more and give their youngest; c,
    # below its share, gives none though its c0 came after a3
    assert [who(r) for r in mix.preempt(8)] == ["b4", "a4"]


class WavingEngine:
    """Requests of one length: each finishes ``wave`` steps after it entered, so a full
    engine frees every slot at once. Asks ``take_out`` at each step as Engine.stream
    does; ``at_step`` runs before each step (a job joining mid-wave)."""

    def __init__(self, wave, at_step):
        self.wave, self.at_step, self.take_out = wave, at_step, None
        self.aborted, self.finished_at = [], {}

    def stream(self, requests, window):
        queue, inside, step, started = iter(requests), [], 0, {}
        while True:
            self.at_step(step)
            live = {id(r) for r in inside}
            if self.take_out is not None and (gone := self.take_out(window, live)):
                ids = {id(r) for r in gone}
                self.aborted += [who(r) for r in inside if id(r) in ids]
                inside = [r for r in inside if id(r) not in ids]
            while len(inside) < window and (request := next(queue, None)) is not None:
                inside.append(request)
                started[who(request)] = step
            if not inside:
                return
            step += 1
            done = [r for r in inside if step - started[who(r)] >= self.wave]
            inside = [r for r in inside if r not in done]
            self.finished_at |= {who(r): step for r in done}
            if done:
                yield [(r, Completion(3, [Choice(who(r), "stop", 1)])) for r in done]


def test_a_small_job_joining_mid_wave_runs_at_once_not_after_the_wave():
    mix = Mix()
    mix.join("big", job("big", 24))

    def join_mid_wave(step):
        if step == 2:  # big0..7 are inside, two steps into their wave of four
            mix.join("small", job("small", 2), owner="bob", size=2)

    engine = WavingEngine(wave=4, at_step=join_mid_wave)
    engine.take_out = mix.preempt
    answered = [
        text for _, lines in retry.run_shared(engine, mix, 8, "m") for text in texts([lines])
    ]
    assert sorted(engine.aborted) == ["big6", "big7"]  # the youngest: big0..7 entered together
    assert engine.finished_at["small0"] == engine.finished_at["small1"] == 2 + 4
    assert engine.finished_at["big5"] == 4  # the others of the wave ran on
    assert sorted(answered) == sorted([f"big{i}" for i in range(24)] + ["small0", "small1"])


def test_a_cancelled_job_leaves_without_touching_the_others():
    mix = Mix()
    for name in "abc":
        mix.join(name, job(name, 5))
    taken = list(itertools.islice(mix, 6))  # a0 b0 c0 a1 b1 c1 inside the engine
    assert sorted(who(r) for r in mix.cancel("b")) == ["b0", "b1"]
    assert take(mix, 4) == ["a2", "c2", "a3", "c3"]
    assert [mix.finished(r) for r in taken if not who(r).startswith("b")] == ["a", "c", "a", "c"]
    assert mix.keys == ["a", "c"]


def test_an_exhausted_job_leaves_and_its_results_still_find_it():
    mix = Mix()
    mix.join("a", job("a", 2))
    mix.join("b", job("b", 4))
    taken = list(mix)
    assert [who(r) for r in taken] == ["a0", "b0", "a1", "b1", "b2", "b3"]
    assert mix.keys == []
    assert [mix.finished(r) for r in taken] == ["a", "b", "a", "b", "b", "b"]


def test_requests_inside_a_failed_engine_go_back_first_to_their_own_job():
    mix = Mix()
    mix.join("a", job("a", 2))
    mix.join("b", job("b", 3))
    taken = list(itertools.islice(mix, 4))  # a0 b0 a1 b1; a has nothing left
    mix.finished(taken[0])
    mix.put_back()
    assert take(mix, 10) == ["a1", "b0", "b1", "b2"]  # a0 had its result: not again


class SharingEngine:
    """Pulls requests as an engine does, ``window`` inside at once, answering with their
    prompt and finishing the oldest first; can fail once after some answers."""

    def __init__(self, fail_after=None):
        self.fail_after = fail_after

    def stream(self, requests, window):
        queue, inside, answered = iter(requests), [], 0
        while True:
            inside += itertools.islice(queue, window - len(inside))
            if not inside:
                return
            if self.fail_after is not None and answered >= self.fail_after:
                self.fail_after = None
                raise RuntimeError("engine core died")
            request = inside.pop(0)
            answered += 1
            yield [(request, Completion(3, [Choice(who(request), "stop", 1)]))]


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(retry, "BACKOFF_SECONDS", (0, 0, 0))


def answers(engine, mix, window=2):
    by_job = {}
    for key, lines in retry.run_shared(engine, mix, window, "m"):
        for line in lines:
            text = line["response"]["body"]["choices"][0]["message"]["content"]
            by_job.setdefault(key, []).append((line["custom_id"], text))
    return by_job


def test_each_result_goes_to_its_own_job_though_custom_ids_repeat():
    mix = Mix()
    mix.join("a", job("a", 3))
    mix.join("b", job("b", 2))
    assert answers(SharingEngine(), mix) == {
        "a": [("r0", "a0"), ("r1", "a1"), ("r2", "a2")],
        "b": [("r0", "b0"), ("r1", "b1")],
    }


def test_after_an_engine_fault_each_job_gets_each_answer_once():
    mix = Mix()
    mix.join("a", job("a", 4))
    mix.join("b", job("b", 4))
    got = answers(SharingEngine(fail_after=3), mix)
    assert sorted(got["a"]) == [(f"r{i}", f"a{i}") for i in range(4)]
    assert sorted(got["b"]) == [(f"r{i}", f"b{i}") for i in range(4)]


def test_an_engine_whose_process_ended_is_not_retried_and_its_requests_go_back():
    class DeadEngine:
        streams = 0

        def stream(self, requests, window):
            self.streams += 1
            list(itertools.islice(requests, window))  # taken inside, then the process ends
            raise EngineDied("the engine's process ended")
            yield  # a generator, as Engine.stream

    mix, engine = Mix(), DeadEngine()
    mix.join("a", job("a", 3))
    mix.join("b", job("b", 3))
    with pytest.raises(EngineDied):
        list(retry.run_shared(engine, mix, 4, "m"))
    assert engine.streams == 1  # a retry on it could not succeed: none
    # every request, those that were inside first, is there for the engine loaded afresh
    assert take(mix, 10) == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_a_job_cancelled_while_it_runs_gets_nothing_more_and_the_others_everything():
    mix = Mix()
    mix.join("a", job("a", 4))
    mix.join("b", job("b", 4))
    got = {}
    for key, lines in retry.run_shared(SharingEngine(), mix, 3, "m"):
        got.setdefault(key, []).extend(line["custom_id"] for line in lines)
        if got.get("b") == ["r0"]:
            mix.cancel("b")  # b1 is inside the engine now: its answer goes nowhere
    assert got == {"a": ["r0", "r1", "r2", "r3"], "b": ["r0"]}


class SteppingEngine:
    """Steps as ``Engine.stream`` does: at each step aborts what ``cancelled`` names,
    tops up to the window from ``requests`` (asking again after it ran dry) and finishes
    the oldest request inside; the stream ends when none is given and none is inside."""

    def __init__(self):
        self.take_out = None  # the feed sets it
        self.aborted, self.streams, self.inside = [], 0, []

    def stream(self, requests, window):
        self.streams += 1
        queue, self.inside = iter(requests), []
        try:
            while True:
                live = {id(r) for r in self.inside}
                if self.take_out is not None and (gone := self.take_out(window, live)):
                    ids = {id(r) for r in gone}
                    self.aborted += [who(r) for r in self.inside if id(r) in ids]
                    self.inside = [r for r in self.inside if id(r) not in ids]
                while len(self.inside) < window and (request := next(queue, None)) is not None:
                    self.inside.append(request)
                if not self.inside:
                    return
                request = self.inside.pop(0)
                yield [(request, Completion(3, [Choice(who(request), "stop", 1)]))]
        finally:  # closed: what is inside is aborted
            self.aborted += [who(r) for r in self.inside]


def texts(batches):
    return [
        line["response"]["body"]["choices"][0]["message"]["content"] for b in batches for line in b
    ]


def test_a_small_job_joining_a_running_feed_is_done_before_the_long_one():
    engine = SteppingEngine()
    feed = Feed(engine, model="m")
    small_done, big_lines = threading.Event(), []

    def long_job():
        for lines in feed.run("big", job("big", 200), 4):
            big_lines.append(lines)
            if len(big_lines) == 5:
                small_done.wait(30)  # the small job drives the engine meanwhile

    thread = threading.Thread(target=long_job)
    thread.start()
    while len(big_lines) < 5:
        time.sleep(0.01)
    small = [
        line for lines in feed.run("small", job("small", 10), 4, owner="bob") for line in lines
    ]
    small_done.set()
    assert "big" in feed.mix.keys  # the long job still had requests to give
    thread.join(30)
    assert sorted(line["custom_id"] for line in small) == sorted(f"r{i}" for i in range(10))
    assert texts([small]) == [f"small{i}" for i in range(10)]
    assert sorted(texts(big_lines)) == sorted(f"big{i}" for i in range(200))
    assert engine.streams == 1  # the small job entered the engine's running stream


class RefusingEngine(SteppingEngine):
    """Refuses every request of job ``bad`` at once (as vLLM refuses a prompt longer
    than the context), answers the others."""

    def stream(self, requests, window):
        for batch in super().stream(requests, window):
            yield [
                (r, EngineRequestError("prompt too long")) if who(r).startswith("bad") else (r, c)
                for r, c in batch
            ]


def test_a_job_whose_every_line_fails_neither_starves_nor_fails_the_other():
    engine = RefusingEngine()
    feed = Feed(engine, model="m")
    bad = []
    thread = threading.Thread(target=lambda: bad.extend(feed.run("bad", job("bad", 300), 4)))
    thread.start()
    good = list(feed.run("good", job("good", 30), 4, owner="bob"))
    thread.join(30)
    assert sorted(texts(good)) == sorted(f"good{i}" for i in range(30))  # whole, every answer
    codes = [line["error"]["code"] for lines in bad for line in lines]
    assert codes == ["engine_rejected"] * 300  # each of its lines failed once, on its own


def test_cancelling_one_job_aborts_its_requests_and_leaves_the_other_whole():
    engine = SteppingEngine()
    feed = Feed(engine, model="m")
    other = []
    thread = threading.Thread(target=lambda: other.extend(feed.run("a", job("a", 50), 4)))
    thread.start()
    cancelled, before_cancel = [], None
    for lines in feed.run("b", job("b", 50), 4):
        cancelled += texts([lines])
        if len(cancelled) >= 3 and before_cancel is None:
            before_cancel = len(engine.aborted)  # a's taken out to make room for b's share
            feed.cancel("b")  # as the cancel signal's handler does: a mark only
    thread.join(30)
    assert sorted(texts(other)) == sorted(f"a{i}" for i in range(50))
    assert len(cancelled) == len(set(cancelled)) < 50
    by_cancel = engine.aborted[before_cancel:]
    assert by_cancel and all(name.startswith("b") for name in by_cancel)
    assert "b" not in feed.mix.keys


def test_a_job_that_stops_reading_leaves_nothing_in_the_engine_for_the_next():
    engine = SteppingEngine()
    feed = Feed(engine, model="m")
    expiring = feed.run("a", job("a", 20), 4)
    assert texts([next(expiring)]) == ["a0"]
    expiring.close()  # as a job whose completion window ended stops reading
    assert engine.aborted == ["a1", "a2", "a3"]
    assert texts(feed.run("b", job("b", 5), 4)) == [f"b{i}" for i in range(5)]
    assert engine.streams == 2 and feed.mix.keys == []


def test_an_engine_the_pool_lets_go_of_is_freed_with_its_feed():
    engine = SteppingEngine()
    feed = feed_of(engine, "m")
    assert feed_of(engine, "m") is feed  # one feed per engine, for every job on it
    assert texts(feed.run("a", job("a", 3), 2)) == ["a0", "a1", "a2"]
    gone = weakref.ref(engine)
    del engine, feed
    gc.collect()
    assert gone() is None  # its memory (a model's weights) goes back


class CountingEngine(SteppingEngine):
    """Counts tokens as ``Engine.activity`` does: one per answer handed back, and
    ``WRITTEN`` so far for each request inside (of a job's requests alone, with ``of``)."""

    WRITTEN = 5
    stopped = False

    def __init__(self):
        super().__init__()
        self.answered = 0

    def stream(self, requests, window):
        for batch in super().stream(requests, window):
            self.answered += len(batch)
            yield batch

    def activity(self, of=None):
        mine = [r for r in self.inside if of is None or id(r) in of]
        return EngineActivity(
            generated_tokens=self.answered + self.WRITTEN * len(self.inside),
            running=len(self.inside),
            progress=tuple((self.WRITTEN, 8) for _ in mine),
        )


def test_a_jobs_live_tokens_beside_another_job_are_its_own():
    """Monitor's live tokens of a job: the engine's counter while it runs alone; beside
    another job, its own answers and its own requests inside (the counter is both's)."""
    engine = CountingEngine()
    first = LocalExecutor(engine, "m", window=4)
    second = LocalExecutor(engine, "m", window=4)
    first_lines = first.run(job("a", 10))
    next(first_lines)  # a0 answered; a1-a3 inside
    assert first.activity().generated_tokens == 1 + 3 * CountingEngine.WRITTEN

    got = next(second.run(job("b", 10)))  # b joins and drives until it has an answer
    assert texts([got]) and all(text.startswith("b") for text in texts([got]))
    inside = [who(r)[0] for r in engine.inside]
    own = CountingEngine.WRITTEN
    assert first.activity().generated_tokens == 1 + own * inside.count("a")  # a0: none of b's
    assert second.activity().generated_tokens == len(got) + own * inside.count("b")
    # what its ETA counts on: the other job's requests inside run in every step of its own
    assert first.activity().beside == inside.count("b") > 0
    assert second.activity().beside == inside.count("a") > 0


class Gate:
    """A run window's gate that lets ``open_for`` requests in, then stays closed."""

    def __init__(self, open_for: int) -> None:
        self.left = open_for

    def __call__(self) -> bool:
        self.left -= 1
        return self.left >= 0


def test_a_job_whose_window_closes_lets_in_no_more_and_gets_the_answers_inside():
    """Alone: the engine's stream ends once the requests inside have finished; none is
    aborted, and the reader ends with exactly the answers of those let in."""
    engine = SteppingEngine()
    feed = Feed(engine, model="m")
    lines = list(feed.run("a", job("a", 20), 4, admit=Gate(6)))
    assert texts(lines) == [f"a{i}" for i in range(6)]
    assert engine.aborted == [] and feed.mix.keys == [] and feed.jobs == 0
    # the engine is free: the job's next run (the rest) starts a stream afresh
    rest = job("a", 20)[6:]
    assert texts(list(feed.run("a2", rest, 4))) == [f"a{i}" for i in range(6, 20)]


def test_a_job_paused_beside_another_leaves_it_whole():
    engine = SteppingEngine()
    feed = Feed(engine, model="m")
    paused_done, other = threading.Event(), []

    def long_job():
        for lines in feed.run("a", job("a", 40), 4):
            other.append(lines)
            if len(other) == 3:
                paused_done.wait(30)  # the paused job drives the engine meanwhile

    thread = threading.Thread(target=long_job)
    thread.start()
    while len(other) < 3:
        time.sleep(0.01)
    paused = [line for b in feed.run("b", job("b", 40), 4, admit=Gate(5)) for line in b]
    paused_done.set()
    thread.join(30)
    assert sorted(texts([paused])) == [f"b{i}" for i in range(5)]  # let in, and finished
    assert sorted(texts(other)) == sorted(f"a{i}" for i in range(40))
    # b's requests inside at the close all finished; a lost only what made room for b's
    # share when b joined (each of its requests still answered once, above)
    assert not [name for name in engine.aborted if name.startswith("b")]
    assert len(engine.aborted) <= 2
    assert engine.streams == 1  # the other job's stream ran on through the pause


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def full_engine_and_a_short_job(clock=None):
    """A 200-request job filling an engine of 64, then a 5-request job of another owner
    joining: the engine narrows to 16 (twice the short job's requests)."""
    mix = Mix(clock or Clock())
    mix.join("big", job("big", 200), size=200)
    inside = list(itertools.islice(mix, 64))
    mix.join("small", job("small", 5), owner="bob", size=5)
    return mix, inside


def test_a_short_job_beside_a_long_one_narrows_the_engine_until_its_requests_finish():
    mix, inside = full_engine_and_a_short_job()
    out = mix.preempt(64, {id(r) for r in inside})
    # 16 inside at once: the short job's 5 and the long job's 11 oldest
    assert [who(r) for r in out] == [f"big{i}" for i in range(63, 10, -1)]
    inside = [r for r in inside if r not in out]
    shorts = list(itertools.islice(mix, 64))  # the mix gives no more than 16 hold
    assert [who(r) for r in shorts] == [f"small{i}" for i in range(5)]
    inside += shorts
    assert mix.preempt(64, {id(r) for r in inside}) == [] and take(mix, 64) == []
    for request in shorts:  # the short job is done: the engine is as wide as before
        mix.finished(request)
        inside.remove(request)
    assert mix.preempt(64, {id(r) for r in inside}) == []
    assert take(mix, 53) == [f"big{i}" for i in range(11, 64)]  # taken out, first again


def test_a_short_job_keeps_the_engine_narrow_no_longer_than_its_time():
    clock = Clock()
    mix, inside = full_engine_and_a_short_job(clock)
    out = mix.preempt(64, {id(r) for r in inside})
    inside = [r for r in inside if r not in out] + list(itertools.islice(mix, 64))
    assert take(mix, 1) == []  # narrow: 16 inside
    clock.now += sharing.NARROW_SECONDS  # its answers are long: the others run wide again
    assert mix.preempt(64, {id(r) for r in inside}) == []
    assert len(take(mix, 48)) == 48  # the engine's window again: 16 inside and 48 more


def test_a_job_on_an_idle_engine_right_after_a_short_one_gets_the_whole_window():
    """A warm engine's first step held 1 of a 100-line job run 12 s after a 12-line one:
    the mix was not why (it gives all 100 at the first ask; see test_engine_stream.py)."""
    mix = Mix(Clock())
    mix.join("first", job("first", 12), size=12)  # short: it narrows for 30 s beside others
    for request in list(itertools.islice(mix, 256)):
        mix.finished(request)
    mix.join("second", job("second", 100), size=100)
    assert mix.preempt(256, set()) == [] and len(take(mix, 256)) == 100


def test_short_jobs_alone_or_an_engine_no_wider_than_their_share_run_as_before():
    mix = Mix(Clock())
    mix.join("a", job("a", 5), size=5)
    mix.join("b", job("b", 5), owner="bob", size=5)
    assert mix.preempt(64, set()) == [] and len(take(mix, 64)) == 10  # nobody long beside
    mix, inside = full_engine_and_a_short_job()
    # narrowed to 10 the engine would be no narrower than 8: the short job claims its share
    assert len(mix.preempt(8, {id(r) for r in inside[:8]})) == 4
