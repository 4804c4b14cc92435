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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from core.reuse.index import Earlier, EarlierLineError, EarlierLines, find_earlier


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


class Identified(Protocol):
    """A request as reuse reads it: by its id (a parsed request, or the worker's
    :class:`~core.run.pending.Planned`, which keeps no texts)."""

    @property
    def custom_id(self) -> str: ...


R = TypeVar("R", bound=Identified)


@dataclass
class ReusePlan(Generic[R]):
    """One model's requests of one run, split by where their answers come from.

    Attributes:
        to_run: what the engine computes, in the order given.
        reused: result lines made from earlier jobs' answers, ready to write.
        keys: the key of each deterministic request (custom_id -> key): its line is
            indexed under it once written, so this job's answers outlive the jobs they
            came from.
        copies: a request in ``to_run`` -> the ids of its duplicates in this run.
        problems: each earlier output that did not hold what its keys said -> what was
            wrong with its first such line (those requests run again), for the history.
    """

    job_id: str
    model_name: str
    to_run: list[R] = field(default_factory=list)
    reused: list[dict[str, Any]] = field(default_factory=list)
    keys: dict[str, bytes] = field(default_factory=dict)
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
    requests: list[R],
    keys: dict[str, bytes],
    *,
    jobs_dir: Path,
    job_id: str,
    model_name: str,
    owner: str | None,
) -> ReusePlan[R]:
    """Splits one model's ``requests`` into a :class:`ReusePlan`; ``keys`` holds the key of
    each request whose answer may be reused (:class:`core.reuse.keys.RequestKeys`), and
    ``owner`` whose job it is: only that owner's earlier answers are taken
    (:func:`core.reuse.index.reuse_owner`); duplicates in the run are copied either way."""
    plan: ReusePlan[R] = ReusePlan(job_id=job_id, model_name=model_name)
    plan.keys = {r.custom_id: keys[r.custom_id] for r in requests if r.custom_id in keys}
    asked = [plan.keys.get(request.custom_id) for request in requests]
    earlier = find_earlier(
        jobs_dir, [key for key in asked if key is not None], skip=job_id, owner=owner
    )
    first: dict[bytes, str] = {}  # key -> the custom_id of this run that computes it
    place = 0  # of the request's key in what find_earlier was asked
    with EarlierLines() as lines:
        for request, key in zip(requests, asked, strict=True):
            source = None
            if key is not None:
                source, place = earlier.get(place), place + 1
            _place(plan, request, key, source, first, lines)
    return plan


def _place(
    plan: ReusePlan[R],
    request: R,
    key: bytes | None,
    source: Earlier | None,
    first: dict[bytes, str],
    lines: EarlierLines,
) -> None:
    """Puts one request where its answer comes from (see :func:`plan_reuse`): ``key`` is
    its key (None: not reusable) and ``source`` the earlier answer under it, if any."""
    if key is None:
        plan.to_run.append(request)
    elif key in first:
        plan.copies.setdefault(first[key], []).append(request.custom_id)
    elif source is not None and (line := _earlier(plan, source, lines)) is not None:
        reused = reused_line(line, request.custom_id, source.job.job_id, plan.model_name)
        plan.reused.append(reused)
    else:
        first[key] = request.custom_id
        plan.to_run.append(request)


def _earlier(plan: ReusePlan[Any], source: Earlier, lines: EarlierLines) -> dict[str, Any] | None:
    """The line ``source`` points at; None where it is broken (said in ``plan.problems``:
    the request runs again)."""
    try:
        return lines.read(source)
    except EarlierLineError as exc:
        plan.problems.setdefault(str(source.job.output), str(exc))
        return None
