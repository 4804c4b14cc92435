"""The hot folder: dropped files become queued jobs, or are moved aside with a report."""

import json
import time
from pathlib import Path

from core.config import SAMPLE_DATA, data_paths
from core.jobs.folder import list_jobs
from core.jobs.inbox import process_file, server_file, watch_inbox


def test_a_broken_file_is_moved_aside_with_its_report(studio_home):
    paths = data_paths()
    dropped = paths.inbox / "broken.jsonl"
    dropped.write_bytes((SAMPLE_DATA / "broken_batch.jsonl").read_bytes())
    assert process_file(dropped, paths) is None
    assert not dropped.exists()
    report = json.loads((paths.inbox / "rejected" / "broken.jsonl.report.json").read_text())
    assert report["invalid"] == 7
    assert any(p["line"] == 3 and "not valid JSON" in p["message"] for p in report["problems"])
    assert (paths.inbox / "rejected" / "broken.jsonl").exists()
    assert list_jobs(paths.jobs) == []


def test_the_watcher_queues_a_valid_file_dropped_into_the_inbox(studio_home, tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr("core.jobs.submit.start_worker", lambda job: started.append(job.job_id))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setattr("core.jobs.inbox.prepare_default_model", lambda: model)
    paths = data_paths()
    observer = watch_inbox(paths)
    try:
        staging = tmp_path / "copying.jsonl"
        staging.write_bytes((SAMPLE_DATA / "review_sentiment.jsonl").read_bytes())
        staging.rename(paths.inbox / "reviews.jsonl")  # an atomic drop, as `mv` does
        deadline = time.monotonic() + 20
        while not started and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        observer.stop()
        observer.join()
    [job] = list_jobs(paths.jobs)
    assert started == [job.job_id]
    assert job.read_spec().source == "inbox/reviews.jsonl"
    assert job.input.read_bytes() == (SAMPLE_DATA / "review_sentiment.jsonl").read_bytes()
    assert not (paths.inbox / "reviews.jsonl").exists()


def test_the_ui_watcher_ingests_new_results_into_duckdb(tmp_path):
    from core.config import DataPaths
    from core.store.db import Store
    from core.store.watchers import start_watchers
    from tests.support.jobs import finished_job

    paths = DataPaths(tmp_path).ensure()
    store = Store(paths.database)
    observers = start_watchers(paths, store)
    try:
        job = finished_job(tmp_path, {"a": "yes", "b": "no"})
        job.write_status(job.read_status())  # a status change, as the worker makes
        deadline = time.monotonic() + 20
        while store.count_results(job.job_id) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for observer in observers:
            observer.stop()
            observer.join()
    assert store.count_results(job.job_id) == 2


def test_a_typed_path_names_the_inboxs_file_of_that_name_else_itself(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "dropped.jsonl").write_text("{}\n")
    assert server_file("dropped.jsonl", inbox) == inbox / "dropped.jsonl"
    assert server_file("elsewhere.jsonl", inbox) == Path("elsewhere.jsonl")
    assert server_file(str(tmp_path / "a.jsonl"), inbox) == tmp_path / "a.jsonl"
    assert server_file("~/b.jsonl", inbox) == Path.home() / "b.jsonl"
