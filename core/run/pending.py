"""The requests a run computes on one engine, read from the job's input as they enter it.

A parsed request costs about 1.1 KiB in the worker (100,000 lines held 107 MiB, 1,000,000
would hold about 1.1 GiB), so the plan keeps none: per request it keeps a
:class:`Planned` (its id, its line, what the counts, the ETA and the engine's settings
need), and :class:`Pending` reads the input again while the engine runs, parsing only the
lines planned, :data:`ORDER_WINDOW` requests at a time, each window in engine order
(:func:`~core.run.engine_order.engine_order`). Prompts that share a prefix share the
engine's cache when they are near each other in the file (within a window), as a file
grouped by document has them; across windows they are computed again.

A request that has its result meanwhile (``left`` no longer holds its id: a model
reloaded after its engine's process ended) is not read again, so a feed that starts over
runs only what is left, across windows as within one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Protocol

from core.check import scan
from core.check.engine_requests import EngineRequest, GeneratedRequest
from core.check.redaction import redact_request
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
    """A request the plan counts on, without its texts (about 0.2 KiB against 1.1)."""

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


def prepared(request: EngineRequest, spec: JobSpec) -> list[tuple[str, str, str]]:
    """Makes a checked request the engine's (redacted, where the job asks: the engine
    answers the redacted prompt, and reuse keys it so); returns what redaction replaced.
    The plan and :class:`Pending` both call it, so a request read again is the same."""
    return redact_request(request, spec.phone_region) if spec.redact else []


class Pending:
    """One engine's requests of a run (see the module doc): :class:`Planned` in memory,
    each parsed again as the engine asks for it. ``left``: the ids still without a result
    (the run's, updated as results are written); ``keep``: what the driver keeps of a
    request whose texts the replicas read (a Ray job's)."""

    def __init__(
        self,
        spec: JobSpec,
        path: Path,
        planned: list[Planned],
        left: set[str],
        keep: Callable[[EngineRequest], EngineRequest] | None = None,
    ) -> None:
        self.spec, self.path, self.left, self.keep = spec, path, left, keep
        self.planned = sorted(planned, key=lambda p: p.line_no)  # the file's order, to read
        self.window = ORDER_WINDOW

    def __len__(self) -> int:
        """The requests still without a result."""
        return sum(p.custom_id in self.left for p in self.planned)

    def __iter__(self) -> Iterator[EngineRequest]:
        return in_windows(self._read(), self.window)

    @property
    def seeded(self) -> bool:
        return any(p.seeded for p in self.planned)

    def _read(self) -> Iterator[EngineRequest]:
        """The planned requests still left, parsed from the input in the file's order."""
        planned = iter(self.planned)
        wanted = next(planned, None)
        for checked in scan(self.path, self.spec.defaults):
            if wanted is None:
                return  # past the last planned line: the rest is not read
            if checked.line_no != wanted.line_no:
                continue
            this, wanted = wanted, next(planned, None)
            if this.custom_id not in self.left or checked.request is None:
                continue
            request = checked.request
            prepared(request, self.spec)
            if isinstance(request, GeneratedRequest):
                request.adapter = this.adapter
            yield self.keep(request) if self.keep else request


def in_windows(requests: Iterable[EngineRequest], size: int) -> Iterator[EngineRequest]:
    """``requests`` read ``size`` at a time, each window in engine order: at most ``size``
    parsed requests are held here at once."""
    requests = iter(requests)
    while window := list(islice(requests, size)):
        yield from engine_order(window)
