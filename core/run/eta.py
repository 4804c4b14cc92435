"""How long a running job still needs: its remaining requests replayed through a model of
the engine.

Counting tokens alone misleads at the end of a job: the engine gives every running request
one token per step, so the last minutes are set by the longest answers still being
written, at the speed of a small batch. The worker therefore simulates what is left, as
continuous batching runs it: ``window`` requests at a time, each as long as an answer
drawn from the model's measured answers (replayed against the request's limit, and longer
than what a running request has written already), the next one admitted as one finishes,
each step taking as long as a step of that many requests took (a line fitted to the
engine's own steps). Several draws are averaged; only the last ``TAIL`` requests are
simulated, the ones before them count at the current token rate.
"""

from __future__ import annotations

import heapq
import random
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

from core.plan.measured import ModelRecord
from core.run.engine import EngineActivity
from core.run.pending import PlannedRequests

TAIL = 2_000  # requests simulated one by one; those before them go at the token rate
DRAWS = 5
SMOOTHING = 0.5  # weight of a new forecast against the previous one
MIN_READINGS = 3  # readings with tokens before the token rate alone may set the speed
LOOP_DECAY = 0.8  # weight of the earlier readings' wall and step times, per reading


@dataclass(frozen=True)
class StepTime:
    """Seconds per engine step as a line in the number of running requests."""

    base: float
    per_request: float

    def __call__(self, running: int) -> float:
        return self.base + self.per_request * running


class StepTimer:
    """Fits :class:`StepTime` to the engine's decode steps: least squares over running
    sums, each older step weighing ``decay`` times less (a machine's load changes)."""

    def __init__(self, decay: float = 0.97) -> None:
        self.decay = decay
        self.n = self.sum_b = self.sum_t = self.sum_bb = self.sum_bt = 0.0
        self.low, self.high = float("inf"), 0.0

    def add(self, running: int, seconds: float) -> None:
        if running <= 0 or seconds <= 0:
            return
        d = self.decay
        self.n, self.sum_b, self.sum_t = self.n * d, self.sum_b * d, self.sum_t * d
        self.sum_bb, self.sum_bt = self.sum_bb * d, self.sum_bt * d
        self.n += 1
        self.sum_b += running
        self.sum_t += seconds
        self.sum_bb += running * running
        self.sum_bt += running * seconds
        self.low, self.high = min(self.low, running), max(self.high, running)

    @property
    def varied(self) -> bool:
        """Whether the batch size varied by a tenth: before that the slope is noise."""
        return self.n > 0 and self.high - self.low >= 0.1 * self.high

    def fit(self, shape: StepTime | None = None) -> StepTime | None:
        """The line, or None before any step was timed.

        Until the batch size has varied by a tenth, the slope is noise: then the line is
        ``shape`` (a line measured on an earlier run) scaled to today's steps, or a
        constant step time (decoding is bound by reading the weights, whatever the batch).
        """
        if self.n == 0:
            return None
        mean_b, mean_t = self.sum_b / self.n, self.sum_t / self.n
        slope = None
        if self.varied:
            spread = self.n * self.sum_bb - self.sum_b**2
            slope = (self.n * self.sum_bt - self.sum_b * self.sum_t) / spread
        if slope is not None and slope >= 0 and mean_t - slope * mean_b >= 0:
            return StepTime(mean_t - slope * mean_b, slope)
        if shape is not None and shape(mean_b) > 0:
            scale = mean_t / shape(mean_b)
            return StepTime(shape.base * scale, shape.per_request * scale)
        return StepTime(mean_t, 0.0)


class LengthDraws:
    """Answer lengths drawn from a model's measured answers; a request's limit when none
    were measured (then every estimate is an upper bound)."""

    def __init__(self, record: ModelRecord, seed: int = 0) -> None:
        self.answers = record.answers
        self.random = random.Random(seed)

    @property
    def bound(self) -> bool:
        return not self.answers

    def draw(self, limit: int, written: int = 0) -> int:
        """One answer length under ``limit``, longer than the ``written`` tokens so far."""
        if not self.answers:
            return max(limit, written + 1)
        for _ in range(8):
            length = round(self.random.choice(self.answers).replayed(limit))
            if length > written:
                return length
        return max(limit, written + 1)  # longer than the measured answers: to its limit


def simulate(
    running: Sequence[tuple[int, int]],
    waiting: Sequence[int],
    window: int,
    lengths: LengthDraws,
    step: StepTime,
    beside: int = 0,
) -> float:
    """Seconds until the last request finishes, in one draw.

    Args:
        running: ``(tokens written, limit)`` of each request in the engine now.
        waiting: the limits of the requests not yet admitted, in admission order.
        window: how many of these requests the engine runs at once.
        lengths: where answer lengths come from.
        step: seconds per step for a number of running requests.
        beside: other jobs' requests in the engine (jobs side by side): every step
            runs them too. They are taken to stay while this job runs.
    """
    ends = [lengths.draw(limit, written) - written for written, limit in running]
    heapq.heapify(ends)
    slots = max(window, 1)
    finish_steps = list(ends)
    for limit in waiting:
        start = heapq.heappop(ends) if len(ends) >= slots else 0
        end = start + lengths.draw(limit)
        heapq.heappush(ends, end)
        finish_steps.append(end)
    if not finish_steps:
        return 0.0
    # Running requests per step: +1 where one starts, -1 where it ends; each step costs
    # the step time of that many.
    finish_steps.sort()
    seconds, running_now, previous = 0.0, len(finish_steps), 0
    for end in finish_steps:
        if end > previous:
            seconds += (end - previous) * step(min(running_now, slots) + beside)
            previous = end
        running_now -= 1
    return seconds


@dataclass(frozen=True)
class Waiting:
    """The requests not yet admitted, as the forecast needs them: how many, the limits of
    the first :data:`TAIL` (a sample of those that run at the token rate) and of the last
    :data:`TAIL` (simulated one by one). Never a copy of a million limits."""

    count: int = 0
    first: tuple[int, ...] = ()
    last: tuple[int, ...] = ()


class Expected:
    """A run's requests still to finish, in run order (engine by engine, as the models run;
    each engine's in the file's order), with the output tokens expected of them.

    A byte a request, no object or string: a dict entry per id cost about 0.2 KiB (200 MiB
    for 1,000,000 lines). Each row of the run's :class:`PlannedRequests` holds its engine's
    number (1 up, at most 255 engines; 0: finished, or not run by an engine), so the rows
    left are found in run order by byte scans, each engine's from its first row left (kept
    between heartbeats). A request expects ``per_answer[(folder number, limit)]`` tokens
    for each of its answers.
    """

    def __init__(
        self,
        planned: PlannedRequests | None = None,
        engines: Sequence[array] = (),
        per_answer: dict[tuple[int, int], int] | None = None,
    ) -> None:
        self.planned = planned if planned is not None else PlannedRequests()
        self.per_answer = per_answer or {}
        self._engine = bytearray(len(self.planned))
        self._marks = [bytes([number]) for number in range(1, len(engines) + 1)]
        self._from = [0] * len(engines)  # each engine's first row left, or after it
        self._to = [len(self._engine)] * len(engines)  # just past each one's last row left
        self._count = self.outstanding = 0  # the requests left, and their expected tokens
        for number, rows in enumerate(engines, start=1):
            for row in rows:
                self._engine[row] = number
                self.outstanding += self.tokens(row)
            self._count += len(rows)

    def __len__(self) -> int:
        return self._count

    def tokens(self, row: int) -> int:
        planned = self.planned
        per_answer = self.per_answer[planned.folder_nos[row], planned.limits[row]]
        return per_answer * planned.answers[row]

    def finished(self, custom_id: str) -> None:
        """A request has its result: no longer left, its tokens no longer expected (once;
        an id not left is ignored)."""
        row = self.planned.index(custom_id)
        if row is not None and self._engine[row]:
            self._engine[row] = 0
            self._count -= 1
            self.outstanding -= self.tokens(row)

    def waiting(self, admitted: int) -> Waiting:
        """The requests after the first ``admitted`` left (in the engine, or finished and
        not handed back yet)."""
        count = max(self._count - admitted, 0)
        take = min(count, TAIL)
        if not take:
            return Waiting(count)
        limits = self.planned.limits
        first = tuple(limits[row] for row in islice(self._forwards(), admitted, admitted + take))
        last = [limits[row] for row in islice(self._backwards(), take)]
        return Waiting(count, first, tuple(reversed(last)))

    def _forwards(self) -> Iterator[int]:
        """The rows left, in run order."""
        engine = self._engine
        for i, mark in enumerate(self._marks):
            row = engine.find(mark, self._from[i])
            self._from[i] = row if row >= 0 else len(engine)
            while row >= 0:
                yield row
                row = engine.find(mark, row + 1)

    def _backwards(self) -> Iterator[int]:
        """The rows left, from the last in run order."""
        engine = self._engine
        for i in reversed(range(len(self._marks))):
            row = engine.rfind(self._marks[i], 0, self._to[i])
            self._to[i] = row + 1
            while row >= 0:
                yield row
                row = engine.rfind(self._marks[i], 0, row)


def remaining_seconds(
    running: Sequence[tuple[int, int]],
    waiting: Waiting,
    window: int,
    lengths: LengthDraws,
    step: StepTime,
    tokens_per_s: float,
    beside: int = 0,
) -> float:
    """The expected seconds left: the requests before the last :data:`TAIL` at the token
    rate (from a sample of them), the rest simulated (an average of :data:`DRAWS` draws).
    Beside other jobs (``beside`` of their requests inside), the job has the slots of the
    window they leave, and every step is a step of both (:func:`simulate`)."""
    seconds, early = 0.0, waiting.count - len(waiting.last)
    if early > 0:
        sample = waiting.first[:early]
        tokens = sum(lengths.draw(limit) for limit in sample) * early / len(sample)
        seconds = tokens / tokens_per_s if tokens_per_s > 0 else 0.0
        running = []  # by the time the tail is reached, today's running requests are done
    slots = max(window - beside, 1)
    runs = [simulate(running, waiting.last, slots, lengths, step, beside) for _ in range(DRAWS)]
    return seconds + sum(runs) / len(runs)


class Forecast:
    """The ETA of one model's run, from the engine's activity read at each heartbeat.

    Between two readings where no prompt was processed, the engine only decoded: the
    steps it logged in between (requests in each, seconds) feed the :class:`StepTimer`.
    The token rate counts from the first reading with tokens generated, so the time spent
    on prompts before does not dilute it.
    """

    def __init__(self, record: ModelRecord, window: int, rate_seconds: float = 20.0) -> None:
        self.lengths = LengthDraws(record)
        self.window = window
        self.timer = StepTimer()
        self.fallback = (
            StepTime(record.step_base, record.step_per_request)
            if record.step_base is not None and record.step_per_request is not None
            else None
        )
        self.rate_seconds = rate_seconds
        # Wall time against the steps' own time, between readings with only decode steps:
        # the loop around the engine's steps (results handed on, requests admitted) takes
        # time no step logs, and an ETA of steps alone read 25 % short at the end of a job.
        self.wall = self.stepped = 0.0
        self.readings: list[tuple[float, EngineActivity]] = []  # since tokens started
        self.last: tuple[float, float] | None = None  # (when, seconds left) last forecast

    def step_time(self) -> StepTime | None:
        """Seconds per step of the engine's loop: the steps' fitted line, scaled by the
        share of wall time the steps themselves take."""
        step = self.timer.fit(self.fallback) or self.fallback
        if step is None or self.stepped <= 0:
            return step
        loop = max(self.wall / self.stepped, 1.0)
        return StepTime(step.base * loop, step.per_request * loop)

    def measured_step_time(self) -> StepTime | None:
        """The step time this run measured, to keep for the model's later runs: only where
        its batch size varied. A line timed at one batch size says nothing of another: kept
        from a 12-request job, it made the next 100-request job's first ETA half the truth."""
        return self.step_time() if self.timer.varied else None

    def _read(self, now: float, activity: EngineActivity) -> float:
        """Takes a reading; returns the token rate over the last ``rate_seconds``."""
        if self.readings:
            then, before = self.readings[-1]
            if activity.prompt_tokens == before.prompt_tokens:  # only decode steps since
                logged = [
                    (running, seconds)
                    for step, running, seconds in activity.recent_steps
                    if before.steps < step <= activity.steps
                ]
                for running, seconds in logged:
                    self.timer.add(running, seconds)
                if logged and len(logged) == activity.steps - before.steps and now > then:
                    self.wall = self.wall * LOOP_DECAY + (now - then)
                    self.stepped = self.stepped * LOOP_DECAY + sum(s for _, s in logged)
        if self.readings or activity.generated_tokens > 0:
            self.readings.append((now, activity))
        recent = [r for r in self.readings if r[0] >= now - self.rate_seconds]
        self.readings = recent or self.readings[-1:]
        if not self.readings:  # no token yet (prompts, a warming engine): no rate
            return 0.0
        (t0, first), (t1, last) = self.readings[0], self.readings[-1]
        return (last.generated_tokens - first.generated_tokens) / (t1 - t0) if t1 > t0 else 0.0

    def seconds(self, now: float, activity: EngineActivity, waiting: Waiting) -> float | None:
        """Seconds left, or None while nothing tells the engine's speed yet. Each forecast
        is averaged with the previous one (less the time since), so one noisy reading
        does not make the ETA jump."""
        rate = self._read(now, activity)
        step = self.step_time()
        if step is None:
            # The first seconds of generation are slow (the engine warms up): a speed read
            # over fewer than three readings would promise hours for minutes of work.
            if rate <= 0 or not activity.progress or len(self.readings) < MIN_READINGS:
                return None
            step = StepTime(0.0, 1.0 / rate)  # every request as fast as the full batch
        eta = remaining_seconds(
            activity.progress, waiting, self.window, self.lengths, step, rate, activity.beside
        )
        if self.last is not None:
            then, previous = self.last
            eta = SMOOTHING * eta + (1 - SMOOTHING) * max(previous - (now - then), 0.0)
        self.last = (now, eta)
        return eta
