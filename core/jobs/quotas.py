"""Quotas: how much one owner may have the engine do, checked when a job is made.

An owner is an API key (``key:<id>``) or a user (``user:<name>``: signed in, or this
machine's user for the CLI, the inbox and the API on loopback without a key), named as
:func:`core.jobs.folder.job_owner` names a job's. Each may have three limits, kept in
``quotas.json`` in the data folder beside ``api_keys.json``:

- ``running_jobs``: jobs not yet ended (created, queued, loading, running, cancelling);
- ``queued_lines``: lines of those jobs not yet answered, the new job's lines included;
- ``tokens_per_day``: prompt + completion tokens the engine computed for the owner's jobs
  over the last 24 hours (a rolling window, not a calendar day): a job's tokens count from
  the moment it runs until 24 h after it ended. Answers reused from earlier results
  (core/reuse) cost nothing and count nothing.

Use is counted from the jobs' ``job.json`` (read once per job: it never changes) and
``status.json`` (parsed again only when it was replaced), never their outputs. An owner
without a quota is never counted.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from core.files import write_atomic
from core.jobs.folder import JobFolder, JobUnreadable, job_owner, list_jobs

DAY_SECONDS = 24 * 3600
LIMITS = ("running_jobs", "queued_lines", "tokens_per_day")


class Quota(BaseModel):
    """One owner's limits; None: that one is not limited."""

    model_config = ConfigDict(extra="forbid")

    running_jobs: int | None = Field(None, ge=1)
    queued_lines: int | None = Field(None, ge=1)
    tokens_per_day: int | None = Field(None, ge=1)

    @property
    def is_set(self) -> bool:
        return any(getattr(self, name) is not None for name in LIMITS)

    def describe(self) -> str:
        """``running_jobs=1 queued_lines=- tokens_per_day=-``, for a listing."""
        return " ".join(f"{name}={getattr(self, name) or '-'}" for name in LIMITS)


_QUOTAS = TypeAdapter(dict[str, Quota])


class QuotaProblem(ValueError):
    """quotas.json cannot be read: what is wrong with it."""


def quotas_file(home: Path) -> Path:
    return home / "quotas.json"


def read_quotas(home: Path) -> dict[str, Quota]:
    """Every owner's quota (none when the file does not exist).

    Raises:
        QuotaProblem: the file is not a quotas file (edited by hand, say).
    """
    try:
        return _QUOTAS.validate_json(quotas_file(home).read_bytes())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise QuotaProblem(f"{quotas_file(home)}: {exc}") from None


def quota_of(home: Path, owner: str) -> Quota:
    return read_quotas(home).get(owner) or Quota()


def set_quota(home: Path, owner: str, quota: Quota) -> None:
    """Keeps ``owner``'s quota; a quota with no limit removes the owner's entry."""
    quotas = read_quotas(home)
    if quota.is_set:
        quotas[owner] = quota
    else:
        quotas.pop(owner, None)
    write_atomic(quotas_file(home), _QUOTAS.dump_json(quotas, indent=1).decode())


@dataclass
class Use:
    """What an owner's jobs hold now.

    Attributes:
        running: jobs not yet ended.
        queued_lines: lines of those jobs not yet answered.
        tokens: tokens computed in the window (running jobs' so far included).
        leaving: (when it leaves the window, tokens) for each job that ended in the window.
    """

    running: int = 0
    queued_lines: int = 0
    tokens: int = 0
    leaving: list[tuple[float, int]] = field(default_factory=list)


class _Held(NamedTuple):
    """What one job holds, from its status: whether it ended, when (epoch seconds), its
    lines not yet answered and the tokens the engine computed for it."""

    ended: bool
    ended_at: float | None
    left: int
    tokens: int


# job folder -> (owner, its lines): job.json is written once, so it is read once per job.
_SPECS: dict[Path, tuple[str | None, int]] = {}
# job folder -> (status.json's lstat, what it holds): status.json is replaced whole on each
# change (a new inode), so an unchanged lstat means an unchanged status: a count over many
# ended jobs costs a stat each, not a parse.
_HELD: dict[Path, tuple[tuple[int, int, int], _Held]] = {}


def _owner_and_lines(job: JobFolder) -> tuple[str | None, int]:
    kept = _SPECS.get(job.path)
    if kept is None:
        spec = job.read_spec()
        kept = _SPECS[job.path] = (job_owner(spec.provenance), spec.input_lines)
    return kept


def _epoch(iso: str | None) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


def _held(job: JobFolder, lines: int) -> _Held:
    try:
        info = os.lstat(job.status_file)
        stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
    except OSError:
        stamp = None
    kept = _HELD.get(job.path)
    if stamp is not None and kept is not None and kept[0] == stamp:
        return kept[1]
    status = job.read_status()  # checks the folder is the studio's own first
    held = _Held(
        ended=status.is_final,
        ended_at=_epoch(status.finished_at),
        left=max((status.total or lines) - status.done, 0),
        tokens=status.prompt_tokens
        + status.completion_tokens
        - status.reused_prompt_tokens
        - status.reused_completion_tokens,
    )
    if stamp is not None:
        _HELD[job.path] = (stamp, held)
    return held


def use_of(jobs_dir: Path, owner: str, now: float | None = None) -> Use:
    """What ``owner``'s jobs in ``jobs_dir`` hold at ``now`` (epoch seconds)."""
    now = time.time() if now is None else now
    use = Use()
    for job in list_jobs(jobs_dir):
        try:
            job_owner_, lines = _owner_and_lines(job)
            if job_owner_ != owner:
                continue
            held = _held(job, lines)
        except JobUnreadable:  # that job's problem: it runs nothing
            continue
        if not held.ended:
            use.running += 1
            use.queued_lines += held.left
            use.tokens += held.tokens
        elif held.ended_at is not None and held.ended_at + DAY_SECONDS > now and held.tokens > 0:
            use.tokens += held.tokens
            use.leaving.append((held.ended_at + DAY_SECONDS, held.tokens))
    return use


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _tokens_free_at(use: Use, limit: int) -> str:
    """When enough of the window's tokens leave it for the owner to be under ``limit``."""
    left = use.tokens
    for at, tokens in sorted(use.leaving):
        left -= tokens
        if left < limit:
            return f"it frees at {_when(at)}, when jobs that ended 24 h before leave the window"
    return (
        "your jobs that have not ended hold that many on their own: it frees 24 h after "
        "they end, as their tokens leave the window"
    )


def over_quota(
    home: Path, jobs_dir: Path, owner: str, who: str, lines: int, now: float | None = None
) -> list[str]:
    """Each limit of ``owner``'s quota a new job of ``lines`` lines would go beyond, as a
    sentence that says which limit, the use now and when it frees; none without a quota.

    Args:
        home: the data folder (its quotas.json).
        jobs_dir: the jobs counted.
        owner: ``key:<id>`` or ``user:<name>``.
        who: the owner as people know it ("key 'alice'"), for the sentences.
        lines: the new job's request lines.

    Raises:
        QuotaProblem: quotas.json cannot be read.
    """
    quota = quota_of(home, owner)
    if not quota.is_set:
        return []
    use = use_of(jobs_dir, owner, now)
    problems = []
    head = f"quota of {who} reached"
    if quota.running_jobs is not None and use.running >= quota.running_jobs:
        problems.append(
            f"{head}: running jobs: at most {quota.running_jobs} at a time (queued ones "
            f"count), and you have {use.running}; it frees when one of your "
            f"{use.running} running jobs ends"
        )
    if quota.queued_lines is not None:
        limit = quota.queued_lines
        if lines > limit:
            problems.append(
                f"{head}: queued lines: at most {limit:,} lines not yet answered, and this "
                f"batch alone has {lines:,}; split it into files of at most {limit:,} lines"
            )
        elif use.queued_lines + lines > limit:
            problems.append(
                f"{head}: queued lines: at most {limit:,} lines not yet answered; your jobs "
                f"have {use.queued_lines:,} and this batch adds {lines:,}; it frees as your "
                f"running jobs answer {use.queued_lines + lines - limit:,} more lines"
            )
    if quota.tokens_per_day is not None and use.tokens >= quota.tokens_per_day:
        problems.append(
            f"{head}: tokens per day: at most {quota.tokens_per_day:,} prompt and completion "
            f"tokens in 24 h, and your jobs used {use.tokens:,} in the last 24 h; "
            + _tokens_free_at(use, quota.tokens_per_day)
        )
    return problems
