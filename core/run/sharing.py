"""One engine, several jobs: which job's request enters the engine next.

A :class:`Mix` is the request stream an engine pulls from (``Engine.stream`` takes the
next request whenever a slot frees). Each job joins it as a source, a lazy iterator of
its requests, with a weight; the mix hands out requests by stride scheduling (weighted
fair queueing over request counts): every source has a *pass*, the next request comes
from the source with the lowest, and taking one advances that source's pass by
``1 / weight``. Two sources of equal weight alternate; weights 2:1 take two requests to
one. A source that joins later starts level with the lowest pass of those already in,
so it gets its share from the next free slot on, without a backlog of credit and
without waiting behind the others' queues. A source leaves when its iterator is
exhausted or when it is cancelled; neither touches the others' requests.

Free slots come only as requests finish, and requests of one length finish together: a
long job's batch full of 16-token answers frees every slot at once, a wave later. So a
source that joins a full engine *claims* its share of the slots (:meth:`Mix.preempt`,
asked at the engine's next step): as many as its weight's part of the window, or its
requests if fewer. Where the free slots fall short, the others' youngest requests beyond
their own shares leave the engine (the ones that lose the fewest tokens) and go back to
the front of their sources, to run again; the freed slots go to the claimant first.

On a CPU a step's time grows with the batch: a short job beside a long one, in a full
batch, waits a full batch's step for each of its tokens (0.85 s on a 2-core EPYC, so a
10-line job of 16-token answers took 19 s). So while a *short* job (at most
``SHORT_JOB`` requests) runs beside a longer one, the mix *narrows* the engine to twice
the short jobs' requests at once: the others' youngest beyond it leave as for a claim,
and the mix gives no more than the narrowed window holds. The long job runs on at the
narrow batch's pace for a few seconds; it lasts at most ``NARROW_SECONDS`` from the short
job's joining, so a short job of long answers cannot hold the engine narrow for long.

A job's weight is its owner's share times its priority factor: each owner has an
equal share, split among that owner's jobs in the mix (a job without an owner is an
owner of its own), so one owner's ten jobs weigh no more than another owner's one.

The mix remembers which source each request it handed out came from, so each finished
result goes back to its own job (:meth:`Mix.finished`), and what was inside the engine
when it failed can be put back for a retry (:meth:`Mix.put_back`).

Jobs join from their own threads while the engine's driver takes requests: every method
holds the mix's lock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator
from dataclasses import dataclass, field

from core.check.engine_requests import EngineRequest

SHORT_JOB = 32  # requests: a job this small narrows the engine while it runs beside others
# The narrowed engine holds twice the short jobs' requests (half of it theirs, beside one
# other owner's job), and at least this many. A step's time grows with its batch on a CPU:
# 256 chats of 16 tokens ran at 58 tokens/s in batches of 16, 98 in batches of 64 and 107
# in batches of 256 (2-core EPYC, docs/benchmarks.md `bench/share.py`).
NARROW_MIN = 16
NARROW_SECONDS = 30.0  # the longest a short job keeps the engine narrow


@dataclass
class Source:
    """One job's requests in the mix."""

    key: Hashable
    owner: Hashable
    priority: float
    requests: Iterator[EngineRequest]
    joined: int  # order of joining: ties go to the earlier source
    passed: float = 0.0  # requests taken, each counted 1 / weight
    claim: int = 0  # slots it claims at the engine's next step (it joined a running mix)
    last_taken: int = -1  # when it last gave a request (ties go to the longest waiting)
    again: deque[EngineRequest] = field(default_factory=deque)  # put back: these go first
    size: int | None = None  # its requests, where known
    given: int = 0  # requests handed out, less those put back
    short_until: float = 0.0  # a short job: the clock's time its narrowing ends (0: none)


class Mix:
    """Requests of several jobs as one stream, shared by weight (see the module doc).

    Iterating the mix yields the next request to run, or stops when no source has one
    left; the engine pulls from it lazily, so a source's requests are read only as they
    enter the engine."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._room: int | None = None  # requests it may still give this step (narrowed)
        self._sources: dict[Hashable, Source] = {}  # the sources with requests to give
        self._taken: dict[int, tuple[Hashable, EngineRequest]] = {}  # id -> (source, request)
        self._gone: dict[Hashable, Source] = {}  # exhausted, some requests maybe inside
        self._joined = 0
        self._takes = 0
        self._lock = threading.RLock()  # reentrant: weight() is read under it

    def join(
        self,
        key: Hashable,
        requests: Iterable[EngineRequest],
        owner: Hashable | None = None,
        priority: float = 1.0,
        size: int | None = None,
    ) -> None:
        """Adds a job's requests, read lazily; ``priority`` multiplies its weight (2.0
        gets twice the share of its owner's other jobs' equals, 0.5 half). ``size``: how
        many requests it has, where known: it claims no more slots than that."""
        if priority <= 0:
            raise ValueError("a priority factor is above 0")
        with self._lock:
            if key in self._sources:
                raise ValueError(f"{key!r} is already in the mix")
            self._gone.pop(key, None)
            owner = key if owner is None else owner
            start = self._level()
            source = Source(key, owner, priority, iter(requests), self._joined, start)
            source.claim = size if size is not None else 1 << 30
            source.size = size
            if size is not None and size <= SHORT_JOB:
                source.short_until = self._clock() + NARROW_SECONDS
            self._sources[key] = source
            self._joined += 1

    def _level(self) -> float:
        """Where a source (re)joining starts: level with the lowest pass in the mix."""
        return min((s.passed for s in self._sources.values()), default=0.0)

    def weight(self, key: Hashable) -> float:
        """The source's weight now: its owner's share, split among that owner's sources in
        the mix, times its priority factor."""
        with self._lock:
            source = self._sources[key]
            siblings = sum(s.owner == source.owner for s in self._sources.values())
            return source.priority / siblings

    @property
    def keys(self) -> list[Hashable]:
        """The sources that still have requests to give, in the order they joined."""
        with self._lock:
            return list(self._sources)

    def __iter__(self) -> Iterator[EngineRequest]:
        return self

    def __next__(self) -> EngineRequest:
        """The next request to run; StopIteration while no source has one (a source that
        joins later makes the mix give again: the engine keeps asking while it runs)."""
        with self._lock:
            if self._room is not None:
                if self._room <= 0:
                    raise StopIteration  # the narrowed engine is full: asked again next step
                self._room -= 1
            while self._sources:
                source = min(
                    self._sources.values(), key=lambda s: (s.passed, s.last_taken, s.joined)
                )
                request = source.again.popleft() if source.again else next(source.requests, None)
                if request is None:  # exhausted: it leaves, its results still come back
                    self._gone[source.key] = self._sources.pop(source.key)
                    continue
                source.passed += 1 / self.weight(source.key)
                source.given += 1
                source.last_taken, self._takes = self._takes, self._takes + 1
                self._taken[id(request)] = (source.key, request)
                return request
        raise StopIteration

    def finished(self, request: EngineRequest) -> Hashable | None:
        """The source a finished request came from (its result goes there); None for a
        request of a source cancelled while it was inside (its result goes nowhere)."""
        with self._lock:
            return self._taken.pop(id(request), (None, None))[0]

    def inside(self, key: Hashable) -> set[int]:
        """The ``id()`` of source ``key``'s requests handed out and not finished yet."""
        with self._lock:
            return {i for i, (k, _) in self._taken.items() if k == key}

    def cancel(self, key: Hashable) -> list[EngineRequest]:
        """Removes a source: none of its requests is handed out again, the others' shares
        grow. Returns its requests inside the engine, for the caller to abort."""
        with self._lock:
            self._sources.pop(key, None)
            self._gone.pop(key, None)
            inside = [(i, r) for i, (k, r) in self._taken.items() if k == key]
            for i, _ in inside:
                del self._taken[i]
            return [request for _, request in inside]

    def preempt(self, window: int, inside: Collection[int] | None = None) -> list[EngineRequest]:
        """Makes room for the sources that joined since the engine's last step (see the
        module doc): returns the requests to take out of the engine, which go back to the
        front of their sources. ``window``: the requests the engine holds at once;
        ``inside``: the ``id()`` of those running in it now (a request finished and not
        yet handed back is no room to make), all handed out if None."""
        with self._lock:
            if inside is None:
                inside = self._taken.keys()
            narrow, short = self._narrowed(window)
            if narrow is not None:
                window = narrow
            taken_out: list[EngineRequest] = []
            for claimant in [s for s in self._sources.values() if s.claim]:
                share = window * self.weight(claimant.key) / self._total_weight()
                wanted, claimant.claim = min(claimant.claim, max(1, int(share))), 0
                need = wanted - (window - (len(inside) - len(taken_out)))
                if need <= 0:
                    continue
                freed = self._take_youngest(need, window, inside, keep={claimant.key, *short})
                if freed:  # the freed slots are its own: it goes first for that many
                    level = min(s.passed for s in self._sources.values())
                    claimant.passed = level - len(freed) / self.weight(claimant.key)
                taken_out += freed
            self._room = None
            if narrow is not None:
                over = len(inside) - len(taken_out) - narrow
                if over > 0:  # narrowed while the engine held more: the excess leaves
                    taken_out += self._take_youngest(over, narrow, inside, keep=short)
                self._room = narrow - (len(inside) - len(taken_out))
            return taken_out

    def _narrowed(self, window: int) -> tuple[int | None, set[Hashable]]:
        """The engine's narrowed window while a short job runs beside a longer one (see
        the module doc), else None; and the short jobs, whose requests stay inside."""
        now = self._clock()
        working = {key for key, _ in self._taken.values()} | {
            key
            for key, s in self._sources.items()
            if s.again or s.size is None or s.given < s.size  # more to give
        }
        sources = [self._sources.get(k) or self._gone.get(k) for k in working]
        short = [s for s in sources if s is not None and s.short_until > now]
        narrow = max(NARROW_MIN, 2 * sum(s.size or 0 for s in short))
        if short and len(short) < len(working) and narrow < window:
            return narrow, {s.key for s in short}
        return None, set()

    def _total_weight(self) -> float:
        return sum(self.weight(key) for key in self._sources)

    def _take_youngest(
        self, count: int, window: int, inside: Collection[int], keep: Collection[Hashable]
    ) -> list[EngineRequest]:
        """Up to ``count`` requests ``inside``, the last taken first, of the sources other
        than those in ``keep`` that hold more slots than their shares (a source with nothing left to
        give has no share); each goes back to the front of its source, uncharged."""
        holding: dict[Hashable, int] = {}
        for i in inside:
            if (taken := self._taken.get(i)) is not None:
                holding[taken[0]] = holding.get(taken[0], 0) + 1
        total = self._total_weight()
        spare = {
            key: held - (window * self.weight(key) / total if key in self._sources else 0)
            for key, held in holding.items()
            if key not in keep
        }
        freed: list[tuple[int, Hashable, EngineRequest]] = []
        for i, (key, request) in reversed(self._taken.items()):
            if len(freed) == count:
                break
            if i in inside and spare.get(key, 0) >= 1:
                spare[key] -= 1
                freed.append((i, key, request))
        for i, key, request in freed:  # the youngest first: each goes in front of the older
            del self._taken[i]
            source = self._sources.get(key)
            if source is None:  # it had given everything: back for this one
                source = self._sources[key] = self._gone.pop(key)
            source.again.appendleft(request)
            source.passed -= 1 / self.weight(key)  # charged again when it is taken again
            source.given -= 1
        return [request for _, _, request in freed]

    def put_back(self) -> None:
        """Returns every request handed out and not finished to the front of its source,
        in the order they were taken (the engine failed: they run again, first). A source
        that had left comes back for them."""
        with self._lock:
            for key, request in self._taken.values():  # dicts keep insertion: taken order
                if key in self._gone:  # it left (exhausted) before the fault: back for these
                    source = self._gone.pop(key)
                    source.passed = self._level()
                    self._sources[key] = source
                self._sources[key].again.append(request)
                self._sources[key].given -= 1
            self._taken.clear()

    def drain(self) -> dict[Hashable, list[EngineRequest]]:
        """Everything not finished, by source (inside the engine, then never handed out),
        and the mix emptied: what fails when the engine cannot go on."""
        with self._lock:
            self.put_back()
            left = {key: [*s.again, *s.requests] for key, s in self._sources.items()}
            self._sources.clear()
            self._gone.clear()
            return {key: requests for key, requests in left.items() if requests}
