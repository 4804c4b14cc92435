"""The pages tests of tests/unit/test_containment.py (split from it by kind; docs/tests.md).

One bad line is that line's error; one bad job folder is that job's error.

The hostile files in ``tests/hostile/`` go through the CLI, the inbox, the worker and the
pages; broken job folders sit beside good ones while the store, the pages, the queue,
``export`` and ``resume`` work on the good ones."""

from __future__ import annotations

import json
import shutil

import pytest

from core.config import data_paths
from core.jobs.inbox import process_file
from core.store.db import Store
from tests.support.cli import cli
from tests.support.containment import BAD_LINES, HOSTILE
from tests.support.jobs import finished_job
from tests.support.pages import open_page


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


def test_pages_name_an_unreadable_job_and_keep_working(good_and_broken, monkeypatch):
    good, broken = good_and_broken
    for page in ("results.py", "jobs.py", "dashboards.py", "review.py", "compare.py"):
        at = open_page(page, job_id=good.job_id)
        shown = "\n".join(t.value for t in at.text)
        assert all(f"job {job.job_id} is unreadable" in shown for job in broken), page
    at = open_page("monitor.py", job_id=broken[0].job_id)
    assert any("cannot be read" in e.value for e in at.error)
    assert "job job_broken_0 is unreadable: job.json" in "\n".join(t.value for t in at.text)


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
    result = cli("check", str(path), "--no-tokens", "--json")
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


def test_pages_name_a_damaged_result_line_by_file_and_line(studio_home):
    """A line of NUL bytes in output.jsonl (issue 58, item 2): the pages say which file
    and line, and none of them fails."""
    job = finished_job(studio_home, {"a": "x", "b": "y", "c": "z"})
    lines = job.output.read_bytes().splitlines(keepends=True)
    lines[1] = b"\x00" * 30 + b"\n"
    job.output.write_bytes(b"".join(lines))
    named = f"{job.output} line 2 is not a JSON object"
    for page in ("jobs.py", "results.py", "monitor.py"):
        at = open_page(page, job_id=job.job_id)
        shown = "\n".join(e.value for e in (*at.text, *at.error, *at.markdown))
        assert named in shown.replace("\\", ""), page
