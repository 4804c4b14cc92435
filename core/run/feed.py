"""One loaded engine, the jobs running on it: the engine's feed.

A :class:`Feed` belongs to one engine (:func:`feed_of`) and holds the
:class:`~core.run.sharing.Mix` its jobs' requests enter by. A job joins with
:meth:`Feed.run` and reads back its own result lines, one per request.

The feed has no thread of its own: the thread of a job that waits for lines *drives*
the engine (resumes :func:`~core.run.retry.run_shared`, handing each job its lines),
and lets go at each batch of its own, for whichever job's thread asks next to take the
same stream on. A job alone on its engine therefore steps the engine from its own
thread, exactly as before jobs shared it. A job that joins while the engine runs enters
at the next free slot (the engine asks the mix again at each step); when the mix has
nothing left and nothing is inside, the stream ends and the next job starts a new one.

A job that joins a full engine claims its share of the slots at the engine's next step
(:meth:`~core.run.sharing.Mix.preempt`): the engine takes the others' youngest requests
beyond their shares out, and they run again later.

A cancel names its job: :meth:`Feed.cancel` only marks the job (a signal handler calls
it); at its next step the engine asks the feed (``Engine.take_out``) and aborts that
job's requests alone, and the job's reader ends with the lines it had. Results that had
finished within the last flush (about a second) and not yet been handed back go with
them: they were never written, so a resume runs them.

A job's run window closing is no cancel: its gate (``admit``, :class:`core.jobs.windows.Gate`)
is asked before each of its requests enters the engine, and once it says no the job gives
no more; its requests inside finish, their lines come back, and its reader ends. The
requests never given stay for the job's next run; the other jobs on the engine run on.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator
from typing import Any

from core.check.engine_requests import EngineRequest
from core.run.pending import Requests
from core.run.retry import StreamingEngine, run_shared
from core.run.sharing import Mix

log = logging.getLogger(__name__)

WAIT_SECONDS = 0.1  # how often a job waiting for lines looks whether the engine needs a driver
CANCELLED = object()  # put on a job's lines when its cancel has taken it out of the mix
HELD = object()  # ...when its gate has closed: it gives no more, those inside still come

Lines = list[dict[str, Any]]


class Admitted:
    """A job's requests as the mix reads them, while its gate admits them: the first
    refusal puts ``HELD`` on the job's lines, and it gives none after (see the module doc)."""

    def __init__(
        self, requests: Iterable[EngineRequest], admit: Callable[[], bool], lines: queue.SimpleQueue
    ) -> None:
        self._requests, self._admit, self._lines = iter(requests), admit, lines
        self.given = 0  # requests handed to the mix
        self.held = False

    def __iter__(self) -> Iterator[EngineRequest]:
        return self

    def __next__(self) -> EngineRequest:
        if not self.held and self._admit():
            request = next(self._requests)
            self.given += 1
            return request
        if not self.held:
            self.held = True
            self._lines.put(HELD)  # the mix asks from the driver's thread: wake the reader
        raise StopIteration


class Feed:
    """The mix of jobs one engine runs (see the module doc). ``model`` is the name in
    output lines (the engine's)."""

    def __init__(self, engine: StreamingEngine, model: str) -> None:
        self.engine, self.model = engine, model
        self.mix = Mix()
        self._lock = threading.Lock()  # guards who drives and the stream
        self._lines: dict[Hashable, queue.SimpleQueue[Any]] = {}  # job -> its lines to read
        self._stream: Iterator[tuple[Hashable, Lines]] | None = None  # run_shared, resumed
        self._driver: Hashable | None = None  # the job whose thread steps the engine now
        self._cancelling: set[Hashable] = set()
        self._windows: dict[Hashable, int] = {}  # job -> requests inside at once it asks
        self.joins = 0  # jobs that have joined since the engine loaded
        engine.take_out = self._take_out  # type: ignore[attr-defined]

    def run(
        self,
        key: Hashable,
        requests: Requests,
        window: int,
        owner: Hashable | None = None,
        priority: float = 1.0,
        admit: Callable[[], bool] | None = None,
    ) -> Iterator[Lines]:
        """Joins ``requests`` to the mix as job ``key`` (a key of this run alone) and
        yields its output lines as they finish, until each request has one or the job is
        cancelled (:meth:`cancel`; then the lines it had); ``requests`` is read once, as
        they enter the engine, and counted once, here. ``window``: requests inside the
        engine at once, from when this job starts the engine's stream (a stream keeps the
        window it started with). ``admit``: the job's run-window gate; once it refuses,
        the lines of the requests inside still come, then the reader ends."""
        lines: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lines[key], self._windows[key] = lines, window
        self.joins += 1
        size = len(requests)
        source = Admitted(requests, admit, lines) if admit is not None else None
        self.mix.join(key, source if source is not None else requests, owner, priority, size)
        left = size
        try:
            while left:
                got = self._next(key, lines)
                if got is CANCELLED:
                    return
                if got is HELD:
                    assert source is not None
                    left -= size - source.given  # never given: no line comes
                    continue
                left -= len(got)
                yield got
        finally:
            if left:  # it left early (cancelled, expired, an error): its requests go too
                self.cancel(key)
            with self._lock:
                self._lines.pop(key, None)
                self._windows.pop(key, None)
                last = not self._lines and self._driver is None
                if last:
                    self._driver = key  # nobody resumes the stream while it closes
            if last:
                self._close()

    def _close(self) -> None:
        """Ends the stream when its last job leaves, as a job alone always ended it: the
        engine aborts what is still inside (a job that expired or failed on the way), and
        the next job starts a stream afresh (its own first token, the CPU load read anew).
        """
        try:
            if self._stream is not None:
                stream, self._stream = self._stream, None
                stream.close()  # type: ignore[attr-defined]  # run_shared's generator
            self._take_cancels()
        finally:
            with self._lock:
                self._driver = None

    def inside(self, key: Hashable) -> set[int]:
        """The ``id()`` of job ``key``'s requests inside the engine now."""
        return self.mix.inside(key)

    @property
    def jobs(self) -> int:
        """The jobs on the engine now."""
        return len(self._lines)

    def cancel(self, key: Hashable) -> None:
        """Takes job ``key`` out at the engine's next step. Only marks it: it runs in a
        signal handler, where no lock may be taken."""
        self._cancelling.add(key)

    def _take_out(self, window: int, inside: Collection[int]) -> list[EngineRequest]:
        """The engine asks at each step what to abort: the requests inside of the jobs
        cancelled since (those jobs leave the mix and their readers end), and those that
        make room for a job that joined (they run again later). ``inside``: the ``id()``
        of the requests running in the engine."""
        room = self.mix.preempt(window, inside)
        if room:
            log.info("%d requests taken out of the engine to run again: a job joined", len(room))
        return self._take_cancels() + room

    def _take_cancels(self) -> list[EngineRequest]:
        """The requests inside of the jobs cancelled since; those jobs leave the mix and
        their readers end."""
        inside: list[EngineRequest] = []
        while self._cancelling:
            key = self._cancelling.pop()
            inside += self.mix.cancel(key)
            if (lines := self._lines.get(key)) is not None:
                lines.put(CANCELLED)
        return inside

    def _next(self, key: Hashable, lines: queue.SimpleQueue[Any]) -> Any:
        """The job's next lines (or CANCELLED): driving the engine until they come while
        nobody else drives, else waiting for the driver to hand them over."""
        while True:
            try:
                return lines.get_nowait()
            except queue.Empty:
                pass
            with self._lock:
                drive = self._driver is None
                if drive:
                    self._driver = key
            if not drive:
                try:
                    return lines.get(timeout=WAIT_SECONDS)
                except queue.Empty:
                    continue
            if not self._drive(key, lines) and lines.empty():
                raise RuntimeError(f"the engine's stream ended without every result of {key!r}")

    def _drive(self, key: Hashable, lines: queue.SimpleQueue[Any]) -> bool:
        """Resumes the stream until something for ``key`` comes (its lines, or its
        cancel: True) or the stream ends (False), handing each job its lines on the way;
        then lets go of the engine."""
        try:
            if self._stream is None:
                window = self._windows[key]
                self._stream = run_shared(self.engine, self.mix, window, self.model)
            for job, batch in self._stream:
                if (reader := self._lines.get(job)) is not None:
                    reader.put(batch)
                if not lines.empty():
                    return True
            self._stream = None  # the mix ran dry and nothing is inside
            self._take_cancels()  # cancels that came after the last step end their readers
            return False
        except BaseException:
            # The stream is dead (a signal stopped it at once, or something run_shared does
            # not retry): what was inside goes back to its jobs, for the next driver.
            self._stream = None
            self.mix.put_back()
            raise
        finally:
            with self._lock:
                self._driver = None


def feed_of(engine: StreamingEngine, model: str) -> Feed:
    """The engine's feed, made by the first job that runs on it. Kept on the engine, so
    that it goes with it when the pool unloads it (a table of feeds would keep it)."""
    feed = getattr(engine, "feed", None)
    if feed is None:
        feed = engine.feed = Feed(engine, model)  # type: ignore[attr-defined]
    return feed
