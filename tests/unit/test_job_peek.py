"""Listings of every job parse each job's files once while unchanged (issue 41 item 5: an
owner with a thousand queued jobs does not slow another owner's page or the queue)."""

from __future__ import annotations

import os
from collections import Counter
from datetime import UTC, datetime

import pytest

from core.jobs.folder import JobFolder, JobUnreadable, create_job, queue_job
from core.jobs.queue import queued_jobs, runnable_jobs
from core.schemas import EngineConfig, JobStatus
from tests.support.jobs import request_line


def queued(tmp_path, n: int) -> list[JobFolder]:
    batch = tmp_path / "batch.jsonl"
    batch.write_text(request_line("a", "hi") + "\n")
    jobs = []
    for _ in range(n):
        job = create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/m"), owner_key="k")
        queue_job(job)
        jobs.append(job)
    return jobs


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """Each full read of a job.json or status.json, by job id and file."""
    counted: Counter = Counter()
    for method, file in (("read_spec", "job.json"), ("read_status", "status.json")):
        real = getattr(JobFolder, method)

        def read(self, real=real, file=file):
            counted[self.job_id, file] += 1
            return real(self)

        monkeypatch.setattr(JobFolder, method, read)
    return counted


def test_the_queue_scan_reads_only_the_jobs_that_changed_since_the_last(tmp_path, reads):
    jobs = queued(tmp_path, 5)
    first = [j.job_id for j in queued_jobs(tmp_path / "jobs")]
    assert first == [j.job_id for j in jobs]
    reads.clear()
    runnable, _ = runnable_jobs(tmp_path / "jobs", datetime.now(UTC))
    assert [j.job_id for j in runnable] == first
    assert not reads  # nothing changed: no file parsed again
    status = jobs[2].read_status()
    status.enter("completed", "completed")
    jobs[2].write_status(status)
    reads.clear()
    assert jobs[2].job_id not in [j.job_id for j in queued_jobs(tmp_path / "jobs")]
    assert {job_id for job_id, _ in reads} == {jobs[2].job_id}  # the changed job alone


def test_a_peek_sees_a_status_written_since(tmp_path):
    job = queued(tmp_path, 1)[0]
    assert job.peek_status().state == "queued"
    job.write_status(JobStatus(state="cancelled"))
    assert job.peek_status().state == "cancelled"


def test_a_peek_refuses_a_folder_given_a_symbolic_link_since(tmp_path):
    job = queued(tmp_path, 1)[0]
    job.peek_spec()
    os.symlink("/etc/passwd", job.path / "name.txt")
    with pytest.raises(JobUnreadable):
        job.peek_spec()
    with pytest.raises(JobUnreadable):
        job.peek_status()
