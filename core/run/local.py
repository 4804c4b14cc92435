"""Executors run a job's requests and yield result lines as they finish.

The worker owns the job folder (what to run, where lines go, the status); an executor owns
how requests reach an engine. :class:`LocalExecutor` runs one engine in the worker's own
process; :class:`core.run.ray_cluster.RayExecutor` spreads the same engine code over a
cluster. Both follow the retry policy of :mod:`core.run.retry` and yield lists of output
lines in the batch output format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from core.run.engine import Engine, EngineActivity
from core.run.feed import feed_of
from core.run.outputs import token_usage
from core.run.pending import Requests
from core.schemas import EngineConfig, JobSpec


class Executor(Protocol):
    """What the worker asks of an executor, whichever it is (local or a Ray cluster)."""

    load_seconds: float  # spent loading the model for this job (0: it was loaded)
    description: str  # where and how the requests run, for the job's status
    window: int  # requests inside one engine at once (0: not known here)
    # Where the executor tells of events the job's history keeps (a Ray node lost); the
    # worker sets it before :meth:`run`. A local engine has none to tell.
    notify: Callable[[str], None] | None
    # Whether another request may enter the engine now (the job's run windows, set by the
    # worker before :meth:`run`; None: always). Once it says no, :meth:`run` yields the
    # lines of the requests inside and ends; the worker pauses the job.
    admit: Callable[[], bool] | None

    def run(self, requests: Requests) -> Iterator[list[dict]]:
        """Yields output lines, in batches, until every request has exactly one, or, after
        :meth:`stop`, those that had finished. ``requests`` is read once, as they run."""
        ...

    def stop(self) -> None:
        """Stops within seconds (a cancel): requests running are aborted, and what has
        been handed back is still yielded. Called from a signal handler: flags only."""
        ...

    def activity(self) -> EngineActivity | None:
        """The engine's counters since this executor started (None where it cannot tell)."""
        ...


def make_executor(spec: JobSpec, job_dir: Path) -> Executor:
    """The executor a job asks for: a Ray cluster if its spec names one, else local."""
    if spec.ray:
        from core.run.ray_cluster import RayExecutor

        return RayExecutor(spec, job_dir)
    return LocalExecutor.for_job(spec)


def loaded_engine(config: EngineConfig) -> tuple[Engine, float]:
    """The engine for ``config``, kept between jobs (:mod:`core.run.pool`); returns it and
    the seconds spent loading (0 when it was already loaded)."""
    from core.run.pool import POOL

    engine, seconds = POOL.get(config)
    return engine, seconds  # type: ignore[return-value]


class LocalExecutor:
    """One engine in this process, fed continuously (no drain between batches). The job
    joins the engine's feed (:mod:`core.run.feed`) with its owner's share: jobs running on
    the same loaded engine share it by weight."""

    def __init__(self, engine: Engine, model: str, window: int, owner: str | None = None) -> None:
        """A job on ``engine`` (loaded: :meth:`for_job` loads it), running up to ``window``
        requests inside it at once; ``model`` is the name in its output lines."""
        self.engine, self.model, self.window, self.owner = engine, model, window, owner
        self.load_seconds = 0.0
        self.engine.stopped = False
        self._base = self.engine.activity()  # a warm engine's counters include earlier jobs
        self._first_token_at: float | None = None  # of this job's first run() on the engine
        self.description = f"on {self.model}, up to {self.window} at a time"
        self.notify: Callable[[str], None] | None = None  # one engine here: no events
        self.admit: Callable[[], bool] | None = None  # the job's run windows (the worker's)
        self.feed = feed_of(self.engine, self.model)
        self._key = object()  # this run's place in the feed: a cancel names it alone
        # Beside other jobs the engine's token counter is theirs too: this job's figures
        # then come from its own results and its own requests inside.
        self._shared = False  # another job has run on the engine beside this one
        self._joins = 0  # the feed's join count once this job has joined
        self._tokens = 0  # completion tokens of this job's results, from its lines

    @classmethod
    def for_job(cls, spec: JobSpec) -> LocalExecutor:
        """The job's executor on its model's engine, loaded first if the pool lacks it. As
        many requests inside as the engine runs at once: a finished request is replaced at
        the next step, so the batch stays full, and a kill loses at most one batch."""
        engine, seconds = loaded_engine(spec.engine)
        window = spec.chunk_size or engine.max_num_seqs
        executor = cls(engine, spec.engine.model_name, window, spec.owner)
        executor.load_seconds = seconds
        return executor

    def run(self, requests: Requests) -> Iterator[list[dict]]:
        self._shared |= self.feed.jobs > 0
        self._joins = self.feed.joins + 1  # this job's own join is the next
        # Closed here, not when collected: a job that stops reading leaves the feed at once.
        feed = closing(
            self.feed.run(self._key, requests, self.window, owner=self.owner, admit=self.admit)
        )
        try:
            with feed as results:
                for lines in results:
                    self._tokens += sum((token_usage(line) or (0, 0))[1] for line in lines)
                    yield lines
        except Exception:
            from core.run.pool import POOL

            POOL.discard(self.engine)  # an engine that failed may be broken: the next job
            raise  # gets a fresh one

    def stop(self) -> None:
        self.feed.cancel(self._key)  # this job's requests only: the others run on

    def activity(self) -> EngineActivity:
        """The engine's counters since this executor started, its progress this job's
        requests alone; beside other jobs, its tokens too (those of its results, and one
        per step for each of its requests inside: an estimate, as the engine counts none
        per request)."""
        self._shared |= self.feed.joins > self._joins  # another job joined after this one
        now, base = self.engine.activity(of=self.feed.inside(self._key)), self._base
        if self._first_token_at is None:
            self._first_token_at = now.first_token_at
        generated = now.generated_tokens - base.generated_tokens
        if self._shared:
            inside = sum(min(written, limit or written) for written, limit in now.progress)
            generated = self._tokens + inside
            beside = max(now.running - len(now.progress), 0)
            now = replace(now, running=len(now.progress), waiting=0, beside=beside)
        return replace(
            now,
            first_token_at=self._first_token_at,
            generated_tokens=generated,
            prefix_cache_queries=now.prefix_cache_queries - base.prefix_cache_queries,
            prefix_cache_hits=now.prefix_cache_hits - base.prefix_cache_hits,
        )
