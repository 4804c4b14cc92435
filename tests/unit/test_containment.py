"""One bad line is that line's error; one bad job folder is that job's error.

The hostile files in ``tests/hostile/`` go through the CLI, the inbox, the worker and the
pages; broken job folders sit beside good ones while the store, the pages, the queue,
``export`` and ``resume`` work on the good ones.
"""

from __future__ import annotations

import json
import shutil

import pytest

from core.config import data_paths
from core.jobs.folder import JobFolder
from core.jobs.ledger import reconcile
from core.jobs.queue import queued_jobs
from core.jobs.submit import resubmit
from core.run import worker
from core.schemas import EngineConfig, JobStatus, now_iso
from core.store.db import Store
from tests.support.cli import cli
from tests.support.containment import BAD_LINES, HOSTILE
from tests.support.jobs import ScriptedExecutor, finished_job


@pytest.mark.parametrize(("name", "expected"), BAD_LINES.items())
def test_a_hostile_line_is_that_lines_error_in_the_cli(name, expected):
    result = cli("check", str(HOSTILE / name), "--no-tokens")
    assert result.returncode == 1
    assert expected in result.stdout
    assert "3 lines, 2 valid, 1 invalid" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("name", BAD_LINES)
def test_a_run_that_skips_a_hostile_line_gives_every_line_its_result(tmp_path, name):
    rows = {"fine-1": {"answer": "hi"}, "fine-3": {"answer": "hello"}}
    job = JobFolder(tmp_path / "jobs" / "job_hostile")
    job.path.mkdir(parents=True)
    shutil.copy(HOSTILE / name, job.input)
    # Made now: a job past its completion window (24 h) expires before it runs.
    spec = {"job_id": job.job_id, "created_at": now_iso(), "skip_invalid": True}
    spec["engine"] = EngineConfig(model="/models/tiny").model_dump()
    job.spec_file.write_text(json.dumps(spec))
    executor = ScriptedExecutor(rows, "tiny")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(worker, "make_executor", lambda spec, job_dir: executor)
        status = worker.run_job(job)
    assert (status.state, status.succeeded, status.failed) == ("completed", 2, 1)
    report = reconcile(job)
    assert report.complete and report.failures_by_class
    [failure] = [json.loads(x) for x in job.errors.read_text().splitlines()]
    assert failure["custom_id"] == "line-2" and failure["error"]["code"] == "invalid_request"
    assert BAD_LINES[name].split("error: ")[1] in failure["error"]["message"]
    store = Store(tmp_path / "studio.duckdb")
    assert store.ingest(job) == 3


def test_an_unreadable_job_folder_is_that_jobs_error_and_the_rest_works(good_and_broken):
    good, broken = good_and_broken
    store = Store(data_paths().database)
    assert store.ingest_all(data_paths().jobs) == 2  # the good job's two results
    assert set(store.unreadable) == {job.job_id for job in broken}
    assert "job.json" in store.unreadable["job_broken_0"]
    assert "state: input should be" in store.unreadable["job_broken_3"]
    assert list(store.jobs()["job_id"]) == [good.job_id]
    store.close()
    assert queued_jobs(data_paths().jobs) == []
    result = cli("export", good.job_id, "-o", str(data_paths().home / "out.csv"))
    assert result.returncode == 0, result.stderr
    assert "2 rows written" in result.stdout
    result = cli("reconcile", good.job_id)
    assert "2 requests, 1 succeeded, 1 failed" in result.stdout


def test_resume_of_a_good_job_ignores_the_broken_ones(good_and_broken, monkeypatch):
    good, _ = good_and_broken
    started = []
    monkeypatch.setattr("core.jobs.submit.start_worker", lambda job, **kw: started.append(job))
    resubmit(good, retry=True)
    assert started == [good]


def test_a_queued_job_whose_folder_breaks_fails_alone_with_the_reason(studio_home):
    job = finished_job(studio_home, {"a": "yes"})
    job.write_status(JobStatus(state="queued"))
    job.spec_file.write_text("{")
    status = worker._run_queued(job)
    assert status.state == "failed" and "job.json" in status.error
    assert job.read_status().state == "failed"


def test_an_upload_is_streamed_to_disk_under_a_generated_name(tmp_path):
    import io
    import tracemalloc

    from core.jobs.uploads import save_upload

    data = b'{"custom_id": "x"}\n' * ((8 << 20) // 19)  # about 8 MiB
    stream = io.BytesIO(data)
    tracemalloc.start()
    saved = save_upload(tmp_path / "uploads", "../../etc/passwd.jsonl", stream)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert saved.parent == tmp_path / "uploads" and saved.name.endswith("_passwd.jsonl")
    assert saved.read_bytes() == data
    assert peak < len(data) / 2  # copied in blocks, never held a second time whole
