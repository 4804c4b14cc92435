"""Delivering a job's results to where its submitter asked: a local file or an object
(``s3://bucket/key.jsonl``), with the error file beside it.

The job folder keeps the results whatever happens here: a delivery that fails (a bucket
gone, wrong credentials) loses nothing, and delivering again (``core resume JOB``, or the
same ``core run`` once more) writes the same files.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.jobs.folder import JobFolder
from core.jobs.ledger import write_combined
from core.schemas import Model
from core.storage.s3 import S3Location, is_s3, put

ERRORS_SUFFIX = ".errors.jsonl"


class Delivery(Model):
    """What :func:`deliver` wrote."""

    output: str  # every request's final result, in input order
    errors: str  # the failed requests' final lines alone (empty when none failed)
    results: int
    failed: int


def errors_beside(target: str) -> str:
    """Where the error file of an output goes: ``out.jsonl`` -> ``out.errors.jsonl``."""
    if is_s3(target):
        return S3Location.parse(target).beside(ERRORS_SUFFIX).uri
    return str(Path(target).with_suffix(ERRORS_SUFFIX))


def deliver(job: JobFolder, target: str) -> Delivery:
    """Writes the job's final results to ``target`` and the failures to the file beside it.

    An object is first written into the job folder, then uploaded from there, streamed (the
    results are never whole in memory), and the staged copies are removed.

    Raises:
        StorageError: an object could not be written (the message names it and why); the
            job folder and its results are untouched.
    """
    errors = errors_beside(target)
    if not is_s3(target):
        output = Path(target)
        output.parent.mkdir(parents=True, exist_ok=True)
        results, failed = write_combined(job, output, Path(errors))
        return Delivery(output=str(output), errors=errors, results=results, failed=failed)
    # Staged under this process's id: the worker and a CLI that delivers for a dead one
    # never share a file.
    staged = [job.path / f".delivering-{os.getpid()}{end}" for end in (".jsonl", ERRORS_SUFFIX)]
    try:
        results, failed = write_combined(job, staged[0], staged[1])
        put(staged[0], target)
        put(staged[1], errors)
    finally:
        for path in staged:
            path.unlink(missing_ok=True)
    return Delivery(output=target, errors=errors, results=results, failed=failed)
