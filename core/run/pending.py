"""The requests a run computes on one engine, read from the job's input as they enter it.

A parsed request costs about 1.1 KiB in the worker (100,000 lines held 107 MiB, 1,000,000
would hold about 1.1 GiB), so the plan keeps none. It keeps :class:`PlannedRequests`, what
the counts, the ETA and the engine's settings need of each request, column by column in
compact arrays (about 30 B a request; an object per request cost about 0.2 KiB, and a set
of ids left 0.1 KiB more), and :class:`Pending` reads the input again while the engine
runs, parsing only the lines planned, :data:`ORDER_WINDOW` requests at a time, each window
in engine order (:func:`~core.run.engine_order.engine_order`). Prompts that share a prefix
share the engine's cache when they are near each other in the file (within a window), as a
file grouped by document has them; across windows they are computed again.

A request that has its result meanwhile (:class:`Left` no longer holds it: a model
reloaded after its engine's process ended) is not read again, so a feed that starts over
runs only what is left, across windows as within one. Neither read keeps the scanner's
table of repeated ids: the job's ledger names the repeated lines, and the plan's ids are
unique.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Protocol

from core.check import scan
from core.check.digests import DIGEST_BYTES as KEY_BYTES
from core.check.engine_requests import EngineRequest, GeneratedRequest
from core.check.redaction import redact_request
from core.row_table import RowTable
from core.run.engine import copies
from core.run.engine_order import engine_order
from core.schemas import Adapter, JobSpec

# Requests parsed and ordered at once: about 9 MiB of them, and as many prompts as a
# prefix group of a well-grouped file needs to run together.
ORDER_WINDOW = 8192


class Requests(Protocol):
    """What an executor runs: requests it may read once, and how many there are."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[EngineRequest]: ...


@dataclass(slots=True)
class Planned:
    """One request as the plan counts on it, without its texts: a row of
    :class:`PlannedRequests` (made where one is asked for, not kept), or a request alone."""

    custom_id: str
    line_no: int  # its line in the input, where :class:`Pending` reads it again
    folder: str  # the local model folder its ``body.model`` maps to
    limit: int = 0  # its max_tokens (0: vectors or scores, nothing generated)
    answers: int = 1  # answers the engine generates for it (a greedy ``n``'s copies aside)
    seeded: bool = False
    adapter: Adapter | None = None  # the LoRA adapter it runs with on its base's engine

    @classmethod
    def of(cls, request: EngineRequest, line_no: int, folder: str) -> Planned:
        if not isinstance(request, GeneratedRequest):
            return cls(request.custom_id, line_no, folder)
        n = int(request.sampling.get("n") or 1) // copies(request)
        seeded = "seed" in request.sampling
        return cls(request.custom_id, line_no, folder, request.max_tokens, n, seeded)


def _append(column: array, value: int) -> array:
    """``column`` with ``value`` appended, widened to 64 bits where it does not fit (each
    column starts as narrow as its common values allow)."""
    try:
        column.append(value)
    except OverflowError:
        column = array("q", column)
        column.append(value)
    return column


class PlannedRequests:
    """A run's planned requests, column by column: row ``i`` is the ``i``-th added, in the
    file's order. The ids are kept as UTF-8 end to end, and found by a table of row numbers
    (:class:`~core.row_table.RowTable`), so no string is held per row. A request whose
    answer may be reused keeps its key here too (16 B; none kept until a row has one), so
    neither the reuse plan nor the result writers hold a dict entry per request."""

    def __init__(self) -> None:
        self._ids = bytearray()
        self._ends = array("I")  # where each row's id ends in _ids
        self.line_nos = array("I")
        self.limits = array("I")
        self.answers = array("B")
        self.seeded = bytearray()
        self.folders: list[str] = []  # the distinct model folders, by their number
        self._folder_no: dict[str, int] = {}
        self.folder_nos = array("B")
        self.keyed = bytearray()  # 1: the row's answer may be reused (it has a key)
        self._keys = bytearray()  # KEY_BYTES a row up to the last keyed one (zeros: no key)
        self._table: RowTable | None = None  # the rows by id, built on use

    def add(
        self, request: EngineRequest, line_no: int, folder: str, key: bytes | None = None
    ) -> None:
        """Adds ``request`` as the next row; ``key``: its reuse key (None: never reused)."""
        row = Planned.of(request, line_no, folder)
        if key is not None:
            if len(key) != KEY_BYTES:
                raise ValueError(f"a key is {KEY_BYTES} bytes")
            self._keys += bytes(len(self) * KEY_BYTES - len(self._keys)) + key
        self.keyed.append(key is not None)
        self._ids += row.custom_id.encode()
        self._ends = _append(self._ends, len(self._ids))
        self.line_nos = _append(self.line_nos, line_no)
        self.limits = _append(self.limits, row.limit or 0)
        self.answers = _append(self.answers, row.answers)
        self.seeded.append(row.seeded)
        if (number := self._folder_no.get(folder)) is None:
            number = self._folder_no[folder] = len(self.folders)
            self.folders.append(folder)
        self.folder_nos = _append(self.folder_nos, number)
        self._table = None

    def __len__(self) -> int:
        return len(self._ends)

    def __iter__(self) -> Iterator[Planned]:
        return (self.row(i) for i in range(len(self)))

    def custom_id(self, row: int) -> str:
        return self._ids[self._ends[row - 1] if row else 0 : self._ends[row]].decode()

    def folder(self, row: int) -> str:
        return self.folders[self.folder_nos[row]]

    def key(self, row: int) -> bytes | None:
        """The reuse key of ``row`` (None: its answer is never reused)."""
        if not self.keyed[row]:
            return None
        return bytes(self._keys[row * KEY_BYTES : (row + 1) * KEY_BYTES])

    def key_of(self, custom_id: str) -> bytes | None:
        """The reuse key of the request ``custom_id`` (None: none, or not planned): what
        its result line is indexed under once written."""
        row = self.index(custom_id)
        return None if row is None else self.key(row)

    def row(self, row: int) -> Planned:
        return Planned(
            self.custom_id(row),
            self.line_nos[row],
            self.folder(row),
            self.limits[row],
            self.answers[row],
            bool(self.seeded[row]),
        )

    def index(self, custom_id: str) -> int | None:
        """The row of ``custom_id`` (None: not planned)."""
        if self._table is None:
            self._table = RowTable(len(self), self.custom_id)
            for row in range(len(self)):
                self._table.add(row)
        return self._table.find(custom_id)


class Left:
    """The planned requests still without a result from this run, a byte per row of a
    :class:`PlannedRequests`; iterates over their ids (the expired lines are written by
    them)."""

    def __init__(self, planned: PlannedRequests) -> None:
        self.planned = planned
        self._flags = bytearray(b"\x01") * len(planned)
        self._count = len(planned)

    def __len__(self) -> int:
        return self._count

    def __contains__(self, row: int) -> bool:
        return bool(self._flags[row])

    def __iter__(self) -> Iterator[str]:
        planned, flags = self.planned, self._flags
        return (planned.custom_id(row) for row in range(len(flags)) if flags[row])

    def discard(self, ids: Iterable[str]) -> None:
        """Those of ``ids`` planned have their result (others are ignored, as in a set)."""
        index = self.planned.index
        self.discard_rows(row for custom_id in ids if (row := index(custom_id)) is not None)

    def discard_rows(self, rows: Iterable[int]) -> None:
        """These rows have their result."""
        flags = self._flags
        for row in rows:
            if flags[row]:
                flags[row] = 0
                self._count -= 1


@dataclass(frozen=True, slots=True)
class Kind:
    """What the engine's settings read of a request (:func:`~core.run.engine.fit_to_requests`)."""

    seeded: bool
    adapter: Adapter | None


def prepared(request: EngineRequest, spec: JobSpec) -> list[tuple[str, str, str]]:
    """Makes a checked request the engine's (redacted, where the job asks: the engine
    answers the redacted prompt, and reuse keys it so); returns what redaction replaced.
    The plan and :class:`Pending` both call it, so a request read again is the same."""
    return redact_request(request, spec.phone_region) if spec.redact else []


class Pending:
    """One engine's requests of a run (see the module doc): ``rows`` of ``planned`` (in
    ascending order, the file's), each parsed again as the engine asks for it. ``left``:
    the run's requests still without a result (updated as results are written); ``keep``:
    what the driver keeps of a request whose texts the replicas read (a Ray job's)."""

    def __init__(
        self,
        spec: JobSpec,
        path: Path,
        planned: PlannedRequests,
        rows: array,
        left: Left,
        keep: Callable[[EngineRequest], EngineRequest] | None = None,
    ) -> None:
        self.spec, self.path, self.planned, self.left, self.keep = spec, path, planned, left, keep
        self.rows = rows
        self.window = ORDER_WINDOW

    def __len__(self) -> int:
        """The requests still without a result."""
        left = self.left
        return sum(row in left for row in self.rows)

    def __iter__(self) -> Iterator[EngineRequest]:
        return in_windows(self._read(), self.window)

    def adapter(self, row: int) -> Adapter | None:
        """The LoRA adapter a row runs with: its model folder's (None: the base model)."""
        return self.spec.adapters.get(self.planned.folder(row))

    def kinds(self) -> list[Kind]:
        """Each kind of request among these once, for the engine's settings."""
        planned, seen = self.planned, set()
        for row in self.rows:
            seen.add((bool(planned.seeded[row]), planned.folder_nos[row]))
        return [Kind(seeded, self.spec.adapters.get(planned.folders[f])) for seeded, f in seen]

    def _read(self) -> Iterator[EngineRequest]:
        """The planned requests still left, parsed from the input in the file's order."""
        rows, line_nos = iter(self.rows), self.planned.line_nos
        wanted = next(rows, None)
        for checked in scan(self.path, self.spec.defaults, repeats=False):
            if wanted is None:
                return  # past the last planned line: the rest is not read
            if checked.line_no != line_nos[wanted]:
                continue
            this, wanted = wanted, next(rows, None)
            if this not in self.left or checked.request is None:
                continue
            request = checked.request
            prepared(request, self.spec)
            if isinstance(request, GeneratedRequest):
                request.adapter = self.adapter(this)
            yield self.keep(request) if self.keep else request


def in_windows(requests: Iterable[EngineRequest], size: int) -> Iterator[EngineRequest]:
    """``requests`` read ``size`` at a time, each window in engine order: at most ``size``
    parsed requests are held here at once."""
    requests = iter(requests)
    while window := list(islice(requests, size)):
        yield from engine_order(window)
