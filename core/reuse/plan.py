"""Which of a run's requests the engine computes, and which take an answer already made.

For the requests of one model, in their order: a deterministic request
(:func:`core.reuse.keys.deterministic`) whose key an earlier job answered takes that
answer; of deterministic requests with the same key in this run, the first runs and the
others take copies of its line; everything else runs. Every line written keeps the batch
format, with its own ``id`` and ``request_id``, and says where its answer came from in
``reused_from`` (``{"job", "custom_id"}``), as ``latency_ms`` rides beside the format.
"""

from __future__ import annotations

import copy
import uuid
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from core.reuse.index import Earlier, EarlierLineError, EarlierLines, find_earlier
from core.row_table import RowTable


def reused_line(
    line: dict[str, Any], custom_id: str, job_id: str, model_name: str
) -> dict[str, Any]:
    """``line``'s answer as the result line of ``custom_id``: a new line of its own (its
    ``id``, its ``request_id``) whose body names this job's model, and whose
    ``reused_from`` names the line the answer came from."""
    body = copy.deepcopy(line["response"]["body"])
    if isinstance(body, dict) and "model" in body:
        body["model"] = model_name
    source = line.get("reused_from") or {"job": job_id, "custom_id": line["custom_id"]}
    return {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": {
            "status_code": line["response"].get("status_code", 200),
            "request_id": f"req_{uuid.uuid4().hex}",
            "body": body,
        },
        "error": line.get("error"),
        "reused_from": dict(source),
    }


# Keys looked up at once: the lookup holds ~50 B a key it asks (the keys, what it found,
# their order), so a job of a million keyed lines asks them a batch at a time.
LOOKUP_BATCH = 65_536
# Answers taken, written at once: a result line costs ~3 KiB until it is written (a
# rerun of a million lines holds 4,096 of them, not a million).
WRITE_BATCH = 4096


class KeyedRows(Protocol):
    """A run's requests as reuse reads them, by row (the worker's
    :class:`~core.run.pending.PlannedRequests`, which keeps neither texts nor an object
    per request)."""

    def custom_id(self, row: int) -> str: ...

    def key(self, row: int) -> bytes | None: ...


@dataclass
class ReusePlan:
    """One model's requests of one run, split by where their answers come from.

    Attributes:
        to_run: the rows the engine computes, in the order given.
        reused: the rows that took an earlier job's answer (their lines are written as
            the plan is made).
        copies: a request in ``to_run`` -> the ids of its duplicates in this run.
        problems: each earlier output that did not hold what its keys said -> what was
            wrong with its first such line (those requests run again), for the history.
    """

    job_id: str
    model_name: str
    to_run: array = field(default_factory=lambda: array("I"))
    reused: array = field(default_factory=lambda: array("I"))
    copies: dict[str, list[str]] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)

    def expand(self, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The engine's ``lines`` and, after each, a copy for every duplicate of it."""
        out: list[dict[str, Any]] = []
        for line in lines:
            out.append(line)
            for duplicate in self.copies.get(line["custom_id"], ()):
                if line["error"] is None:
                    out.append(reused_line(line, duplicate, self.job_id, self.model_name))
                else:  # a failure is the duplicate's too: retried with it
                    out.append({**copy.deepcopy(line), "custom_id": duplicate})
        return out

    @property
    def reused_count(self) -> int:
        return len(self.reused) + sum(len(ids) for ids in self.copies.values())


def plan_reuse(
    requests: KeyedRows,
    rows: Sequence[int],
    *,
    jobs_dir: Path,
    job_id: str,
    model_name: str,
    owner: str | None,
    write: Callable[[list[dict[str, Any]]], None],
) -> ReusePlan:
    """Splits one model's ``rows`` of ``requests`` into a :class:`ReusePlan` and hands the
    result lines made of earlier answers to ``write`` (:data:`WRITE_BATCH` at a time); a
    row whose answer may be reused has a key (:class:`core.reuse.keys.RequestKeys`), and
    ``owner`` is whose job it is: only that owner's earlier answers are taken
    (:func:`core.reuse.index.reuse_owner`); duplicates in the run are copied either way.
    Keys are looked up :data:`LOOKUP_BATCH` at a time, and the rows that compute a key are
    found by a table of row numbers: the plan holds no object per request."""
    plan = ReusePlan(job_id=job_id, model_name=model_name)
    first = RowTable(len(rows), requests.key)  # the row of this run that computes each key
    taken: list[dict[str, Any]] = []  # result lines not written yet
    with EarlierLines() as lines:
        for start in range(0, len(rows), LOOKUP_BATCH):
            batch = rows[start : start + LOOKUP_BATCH]
            asked = [requests.key(row) for row in batch]
            earlier = find_earlier(
                jobs_dir, [key for key in asked if key is not None], skip=job_id, owner=owner
            )
            place = 0  # of the row's key in what find_earlier was asked
            for row, key in zip(batch, asked, strict=True):
                source = None
                if key is not None:
                    source, place = earlier.get(place), place + 1
                if (line := _place(plan, requests, row, key, source, first, lines)) is not None:
                    taken.append(line)
                if len(taken) == WRITE_BATCH:
                    write(taken)
                    taken = []
    if taken:
        write(taken)
    return plan


def _place(
    plan: ReusePlan,
    requests: KeyedRows,
    row: int,
    key: bytes | None,
    source: Earlier | None,
    first: RowTable,
    lines: EarlierLines,
) -> dict[str, Any] | None:
    """Puts one row where its answer comes from (see :func:`plan_reuse`): ``key`` is its
    key (None: not reusable) and ``source`` the earlier answer under it, if any. Returns
    the row's result line where it takes an earlier answer."""
    if key is None:
        plan.to_run.append(row)
    elif (computing := first.find(key)) is not None:
        duplicate = requests.custom_id(row)
        plan.copies.setdefault(requests.custom_id(computing), []).append(duplicate)
    elif source is not None and (line := _earlier(plan, source, lines)) is not None:
        plan.reused.append(row)
        return reused_line(line, requests.custom_id(row), source.job.job_id, plan.model_name)
    else:
        first.add(row)
        plan.to_run.append(row)
    return None


def _earlier(plan: ReusePlan, source: Earlier, lines: EarlierLines) -> dict[str, Any] | None:
    """The line ``source`` points at; None where it is broken (said in ``plan.problems``:
    the request runs again)."""
    try:
        return lines.read(source)
    except EarlierLineError as exc:
        plan.problems.setdefault(str(source.job.output), str(exc))
        return None
