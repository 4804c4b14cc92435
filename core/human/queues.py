"""Queues: a sample's items shared out among named reviewers, each item to ``overlap`` of them.

An owner sets a queue over a sample (its reviewers and the overlap); it is human work like
the labels: appended to ``queues.jsonl`` in the data folder (``core.human.files``), the latest
line of a sample wins, so it survives a rebuilt database. The file holds a line per change
of a queue and per skip, so it is read whole (no index).

The sample's items go out in blocks of as many items as there are reviewers: in a block,
item ``b`` goes to reviewer ``b`` and those ``d``, ``2d``, ... places after them in the
list, round it, with a stride ``d`` that changes from block to block. Each block gives every
reviewer exactly ``overlap`` items, every item has ``overlap`` different reviewers, and the
blocks together pair every reviewer with every other (agreement is measured per pair). The
assignment is a function of the sample's order and the list alone: nothing is stored per
item, and every page and process computes the same queues.

A reviewer's queue is their items in the sample's order, those they skipped after the rest
(in the order they skipped them); labelling one takes it out of what is left.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from core.human.files import QUEUES, QueueRecord, SkipRecord, append, now_utc, read_from

Key = tuple[str, str]  # (job_id, custom_id)
MAX_REVIEWERS = 50
REVIEWER_CHARS = 80


class QueueError(ValueError):
    """A queue that cannot be set; the message says why."""


@dataclass(frozen=True)
class Queue:
    sample_id: str
    reviewers: tuple[str, ...]
    overlap: int
    by: str

    @cached_property
    def _strides(self) -> list[int]:
        """Strides whose first ``overlap`` multiples fall on as many places round the list."""
        n = len(self.reviewers)
        return [d for d in range(1, n) if n // math.gcd(d, n) >= self.overlap] or [1]

    def reviewers_of(self, position: int) -> tuple[str, ...]:
        """Who reviews the sample's item at ``position`` (from 0)."""
        n, k = len(self.reviewers), self.overlap
        block, first = divmod(position, n)
        d = self._strides[block % len(self._strides)]
        return tuple(self.reviewers[(first + j * d) % n] for j in range(k))

    def assigned(self, keys: Sequence[Key], reviewer: str) -> list[Key]:
        """The items of ``keys`` (the sample's, in its order) ``reviewer`` reviews."""
        # The assignment repeats every len(strides) blocks: one period read, not every item
        # (10,000 items' reviewers_of took 0.1 s of each Review run in a queue).
        period = len(self.reviewers) * len(self._strides)
        mine = [reviewer in self.reviewers_of(i) for i in range(min(period, len(keys)))]
        return [k for i, k in enumerate(keys) if mine[i % period]]


@dataclass(frozen=True)
class Progress:
    reviewer: str
    assigned: int
    labelled: int
    skipped: int  # put off and not labelled yet

    @property
    def left(self) -> int:
        return self.assigned - self.labelled


def parse_reviewers(text: str) -> tuple[str, ...]:
    """Comma- or line-separated names, trimmed, without blanks or repeats."""
    names: dict[str, str] = {}
    for raw in text.replace("\n", ",").split(","):
        name = raw.strip()
        if not name:
            continue
        if len(name) > REVIEWER_CHARS:
            raise QueueError(f"a reviewer's name has at most {REVIEWER_CHARS} characters")
        if not name.isprintable():
            raise QueueError(f"a reviewer's name cannot hold control characters ({name!r})")
        names.setdefault(name.casefold(), name)
    if len(names) > MAX_REVIEWERS:
        raise QueueError(f"at most {MAX_REVIEWERS} reviewers ({len(names)} given)")
    return tuple(names.values())


def set_queue(folder: Path, sample_id: str, reviewers: str, overlap: int, by: str) -> Queue:
    """Sets the sample's queue from a list of names and an overlap; returns it.

    Raises:
        QueueError: no reviewer, an overlap below one or above the number of reviewers.
    """
    names = parse_reviewers(reviewers)
    if not names:
        raise QueueError("name at least one reviewer")
    if overlap < 1:
        raise QueueError("each item needs at least one review (an overlap of 1 or more)")
    if overlap > len(names):
        raise QueueError(
            f"an overlap of {overlap} needs at least {overlap} reviewers; {len(names)} named"
        )
    record = QueueRecord(
        sample_id=sample_id, reviewers=list(names), overlap=overlap, by=by, at=now_utc()
    )
    append(folder, record)
    return Queue(sample_id, names, overlap, by)


def _records(folder: Path) -> Iterable[QueueRecord | SkipRecord]:
    for _, record in read_from(folder / QUEUES, 0, 0).records:
        if isinstance(record, QueueRecord | SkipRecord):
            yield record


def queue_of(folder: Path, sample_id: str) -> Queue | None:
    """The sample's queue as last set (None: no queue, everyone reviews every item)."""
    found = None
    for record in _records(folder):
        if isinstance(record, QueueRecord) and record.sample_id == sample_id:
            found = Queue(sample_id, tuple(record.reviewers), record.overlap, record.by)
    return found


def skip(folder: Path, sample_id: str, reviewer: str, key: Key) -> None:
    """Puts the item off to the end of the reviewer's queue."""
    job_id, custom_id = key
    append(
        folder,
        SkipRecord(
            sample_id=sample_id, reviewer=reviewer, job_id=job_id, custom_id=custom_id,
            at=now_utc(),
        ),
    )  # fmt: skip


def skipped(folder: Path, sample_id: str, reviewer: str) -> list[Key]:
    """The items the reviewer put off, in the order of their last skip."""
    order: dict[Key, None] = {}
    for record in _records(folder):
        if isinstance(record, SkipRecord) and (record.sample_id, record.reviewer) == (
            sample_id,
            reviewer,
        ):
            key = (record.job_id, record.custom_id)
            order.pop(key, None)
            order[key] = None
    return list(order)


def queue_order(
    queue: Queue, keys: Sequence[Key], reviewer: str, put_off: Sequence[Key]
) -> list[Key]:
    """The reviewer's items: those not put off in the sample's order, then the put-off ones
    in the order they were put off."""
    mine = queue.assigned(keys, reviewer)
    assigned = set(mine)
    later = [k for k in put_off if k in assigned]
    held = set(later)
    return [k for k in mine if k not in held] + later


def progress(
    queue: Queue, keys: Sequence[Key], labelled: dict[str, set[Key]], put_off: dict[str, list[Key]]
) -> list[Progress]:
    """Each reviewer's share of the queue: assigned, labelled, put off and not labelled."""
    rows = []
    for reviewer in queue.reviewers:
        mine = queue.assigned(keys, reviewer)
        done = labelled.get(reviewer, set())
        rows.append(
            Progress(
                reviewer,
                len(mine),
                sum(k in done for k in mine),
                len({k for k in put_off.get(reviewer, []) if k not in done} & set(mine)),
            )
        )
    return rows
