"""One bad line is that line's error; one bad job folder is that job's error.

The hostile files in ``tests/hostile/`` go through the CLI, the inbox, the worker and the
pages; broken job folders sit beside good ones while the store, the pages, the queue,
``export`` and ``resume`` work on the good ones.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.config import REPO_ROOT, data_paths
from core.jobs.folder import JobFolder
from core.jobs.inbox import process_file
from core.jobs.ledger import reconcile
from core.jobs.queue import queued_jobs
from core.jobs.submit import resubmit
from core.run import worker
from core.schemas import EngineConfig, JobStatus, now_iso
from core.store.db import Store
from tests.support.cli import run_cli
from tests.support.jobs import ScriptedExecutor, finished_job
from tests.support.pages import open_page

HOSTILE = REPO_ROOT / "tests" / "hostile"
BAD_LINES = {
    "deep_nesting.jsonl": "line 2: error: the JSON is nested too deeply to read",
    "lone_surrogate.jsonl": "line 2: error: the line holds an unpaired UTF-16 surrogate",
}


@pytest.mark.parametrize(("name", "expected"), BAD_LINES.items())
def test_a_hostile_line_is_that_lines_error_in_the_cli(name, expected):
    result = run_cli("check", str(HOSTILE / name), "--no-tokens")
    assert result.returncode == 1
    assert expected in result.stdout
    assert "3 lines, 2 valid, 1 invalid" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("name", BAD_LINES)
def test_the_inbox_sets_a_hostile_file_aside_and_the_pages_still_open(studio_home, name):
    paths = data_paths()
    dropped = paths.inbox / name
    shutil.copy(HOSTILE / name, dropped)
    assert process_file(dropped, paths, "/models/unused") is None
    assert not dropped.exists() and (paths.inbox / "rejected" / name).exists()
    report = json.loads((paths.inbox / "rejected" / f"{name}.report.json").read_text())
    assert any(BAD_LINES[name].split("error: ")[1] in p for p in report["refused"])
    for page in ("upload.py", "results.py", "jobs.py", "dashboards.py"):
        open_page(page)  # raises on any exception on the page


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


BROKEN_FOLDERS = {
    "garbage": ("job.json", b"\x00\xffnot json at all"),
    "empty": ("status.json", b""),
    "wrong types": ("job.json", b'{"job_id": 7, "created_at": [], "engine": "big"}'),
    "bad state": ("status.json", b'{"state": "exploded"}'),
}


@pytest.fixture
def good_and_broken(studio_home: Path) -> tuple[JobFolder, list[JobFolder]]:
    good = finished_job(studio_home, {"a": "yes", "b": None})
    broken = []
    for number, (file, content) in enumerate(BROKEN_FOLDERS.values()):
        job = finished_job(studio_home / f"b{number}", {"x": "fine"})
        target = data_paths().jobs / f"job_broken_{number}"
        shutil.move(job.path, target)
        (target / file).write_bytes(content)
        broken.append(JobFolder(target))
    return good, broken


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
    result = run_cli("export", good.job_id, "-o", str(data_paths().home / "out.csv"))
    assert result.returncode == 0, result.stderr
    assert "2 rows written" in result.stdout
    result = run_cli("reconcile", good.job_id)
    assert "2 requests, 1 succeeded, 1 failed" in result.stdout


def test_pages_name_an_unreadable_job_and_keep_working(good_and_broken, monkeypatch):
    good, broken = good_and_broken
    for page in ("results.py", "jobs.py", "dashboards.py", "review.py", "compare.py"):
        at = open_page(page, job_id=good.job_id)
        shown = "\n".join(t.value for t in at.text)
        assert all(f"job {job.job_id} is unreadable" in shown for job in broken), page
    at = open_page("monitor.py", job_id=broken[0].job_id)
    assert any("cannot be read" in e.value for e in at.error)
    assert "job job_broken_0 is unreadable: job.json" in "\n".join(t.value for t in at.text)


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


def test_a_deleted_job_folder_is_forgotten_by_the_store_and_the_pages(studio_home):
    keep = finished_job(studio_home, {"a": "yes"})
    gone = finished_job(studio_home / "other", {"b": "yes"})
    shutil.move(gone.path, data_paths().jobs / gone.job_id)
    store = Store(data_paths().database)
    store.ingest_all(data_paths().jobs)
    assert len(store.jobs()) == 2
    store.close()
    at = open_page("jobs.py", job_id=gone.job_id)
    shutil.rmtree(data_paths().jobs / gone.job_id)
    at.run()
    assert not at.exception
    at = open_page("jobs.py", job_id=gone.job_id)
    assert at.selectbox[0].value == keep.job_id  # the gone job is no longer offered


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


CORPUS = sorted(HOSTILE.glob("*.jsonl"))
INVALID_LINES = {"deep_nesting.jsonl": 1, "lone_surrogate.jsonl": 1}


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_the_hostile_corpus_walks_through_the_cli_the_inbox_and_the_upload_page(
    studio_home, tmp_path, monkeypatch, path
):
    monkeypatch.setattr("core.jobs.submit.start_worker", lambda job, **kw: None)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    invalid = INVALID_LINES.get(path.name, 0)
    result = run_cli("check", str(path), "--no-tokens", "--json")
    assert result.returncode == (1 if invalid else 0), result.stderr
    report = json.loads(result.stdout)
    assert (report["invalid"], report["valid"] + report["invalid"]) == (invalid, report["lines"])
    paths = data_paths()
    dropped = paths.inbox / path.name
    shutil.copy(path, dropped)
    taken = process_file(dropped, paths, str(model))
    assert (taken is None) == bool(invalid)  # an invalid file is set aside, a valid one queued
    assert not dropped.exists()
    at = open_page("upload.py")
    at.radio(key="source").set_value("A file on the server").run()
    at.text_input(key="server_path").input(str(path)).run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Invalid"] == str(invalid)
