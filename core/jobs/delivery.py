"""Delivering a job's results to where its submitter asked: a local file or an object
(``s3://bucket/key.jsonl``), with the error file beside it.

The job folder keeps the results whatever happens here: a delivery that fails (a bucket
gone, wrong credentials) loses nothing, and delivering again (``core resume JOB``, or the
same ``core run`` once more) writes the same files.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from core.jobs.folder import JobFolder
from core.jobs.ledger import combined_lines, write_combined
from core.schemas import Model
from core.storage.s3 import S3Location, StorageError, is_s3, remove_under, upload_stream

log = logging.getLogger(__name__)

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

    An object is written by one multipart upload streamed from the job folder's files (a
    few parts in memory, never the whole; nothing staged on disk); the parts a Ray job's
    replicas wrote under the output are removed after.

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
    counted = [0, 0]
    upload_stream(_counting(combined_lines(job), counted, 0), target)
    upload_stream(_counting(combined_lines(job, only="errors"), counted, 1), errors)
    _remove_parts(job, target)
    return Delivery(output=target, errors=errors, results=counted[0], failed=counted[1])


def _counting(lines: Iterator[bytes], counts: list[int], slot: int) -> Iterator[bytes]:
    for line in lines:
        counts[slot] += 1
        yield line


def parts_prefix(target: str, job_id: str) -> str:
    """Where the replicas of a Ray job write their shards' results before the output
    object is assembled: ``<output key>.parts/<job id>/``, one object per shard run."""
    return f"{target}.parts/{job_id}/"


def _remove_parts(job: JobFolder, target: str) -> None:
    """Removes the parts a Ray job's replicas wrote (those of dead attempts too): the job
    folder holds every acknowledged result, so they are not needed once delivered."""
    if not job.acks.exists():
        return
    try:
        remove_under(parts_prefix(target, job.job_id))
    except StorageError as exc:  # the results are delivered: leftovers only cost storage
        log.warning("job %s: the result parts stay: %s", job.job_id, exc)
