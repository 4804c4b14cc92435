"""Job names are unique in a studio: two jobs never share one, whatever their case.

A job made with a name another job has gets the first free ``NAME (2)``, ``NAME (3)``...
(a script that submits "nightly" every day must not fail, and its jobs must still be told
apart in every list); a rename to a name another job has is refused, naming that job. The
submission (:func:`core.jobs.submit.submit`) and every rename (CLI, Jobs page) call these.
"""

from __future__ import annotations

from pathlib import Path

from core.jobs.folder import JobFolder, JobUnreadable, list_jobs
from core.schemas import NAME_MAX, check_name


def _key(name: str) -> str:
    return name.casefold()


def names_taken(jobs_dir: Path, but: str | None = None) -> dict[str, str]:
    """The jobs' names (case-folded) and the job that has each, ``but`` that job; a job
    whose folder cannot be read holds no name."""
    taken: dict[str, str] = {}
    for job in list_jobs(jobs_dir):
        if job.job_id == but:
            continue
        try:
            name = job.name
        except JobUnreadable:
            continue
        if name:
            taken.setdefault(_key(name), job.job_id)
    return taken


def distinct_name(jobs_dir: Path, name: str, but: str | None = None) -> str:
    """``name``, or when another job than ``but`` has it the first free ``name (N)`` from
    2 (cut so it stays within :data:`NAME_MAX` characters)."""
    taken = names_taken(jobs_dir, but)
    if _key(name) not in taken:
        return name
    number = 2
    while True:
        suffix = f" ({number})"
        candidate = name[: NAME_MAX - len(suffix)].rstrip() + suffix
        if _key(candidate) not in taken:
            return candidate
        number += 1


def rename_job(job: JobFolder, text: str) -> str:
    """Gives ``job`` a new name that no other job has; returns the name as kept.

    Raises:
        ValueError: the name is empty, too long, or another job's (named in the message).
    """
    name = check_name(text)
    other = names_taken(job.path.parent, but=job.job_id).get(_key(name))
    if other is not None:
        # The other job by its name as it has it (not as typed: "BIG300" for "big300").
        try:
            kept = JobFolder(job.path.parent / other).name or name
        except JobUnreadable:
            kept = name
        raise ValueError(
            f"another job is named {kept!r} (job {other}); job names are unique, whatever "
            "their case: choose another"
        )
    return job.rename(name)
