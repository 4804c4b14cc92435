"""Odd files in the data folder (issue 31, item 8): FIFOs, symbolic links and other
non-regular entries (job folders, files inside them, inbox entries, a saved rules file)
are refused and named, never followed, read or blocked on."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from core.config import SAMPLE_DATA, data_paths
from core.jobs.folder import JobFolder, JobUnreadable
from core.jobs.inbox import process_inbox
from core.qa import grading
from core.store.db import Store
from tests.support.cli import cli
from tests.support.pages import job_in_home


def bounded(call, seconds: float = 10.0):
    """Runs ``call`` in a thread; fails the test (instead of hanging it) if it blocks."""
    out: dict = {}

    def target() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"blocked for {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def test_a_fifo_in_the_inbox_is_refused_unread_and_later_files_are_taken(
    studio_home, model, no_worker
):
    paths = data_paths().ensure()
    os.mkfifo(paths.inbox / "a_pipe.jsonl")
    (paths.inbox / "b_good.jsonl").write_bytes(
        (SAMPLE_DATA / "review_sentiment.jsonl").read_bytes()
    )
    taken = bounded(lambda: process_inbox(paths, str(model)))
    assert taken[0] is None and isinstance(taken[1], JobFolder)  # the good file queued
    report = json.loads((paths.inbox / "rejected" / "a_pipe.jsonl.report.json").read_text())
    assert report["refused"] == [
        "a_pipe.jsonl is a named pipe (FIFO), not a regular file (not read)"
    ]
    assert not (paths.inbox / "a_pipe.jsonl").exists()


def test_a_symlink_in_the_inbox_is_refused_and_what_it_points_to_is_left_alone(
    studio_home, model, no_worker, tmp_path
):
    paths = data_paths().ensure()
    secret = tmp_path / "elsewhere.jsonl"
    secret.write_bytes((SAMPLE_DATA / "review_sentiment.jsonl").read_bytes())
    (paths.inbox / "link.jsonl").symlink_to(secret)
    assert bounded(lambda: process_inbox(paths, str(model))) == [None]
    report = json.loads((paths.inbox / "rejected" / "link.jsonl.report.json").read_text())
    assert report["refused"] == ["link.jsonl is a symbolic link (not followed)"]
    assert (paths.inbox / "rejected" / "link.jsonl").is_symlink()  # moved as itself
    assert secret.read_bytes() == (SAMPLE_DATA / "review_sentiment.jsonl").read_bytes()
    assert not no_worker  # nothing was queued


def test_a_job_folder_that_links_outside_is_named_not_indexed_nor_renamed(studio_home, tmp_path):
    real = job_in_home(studio_home, [{"custom_id": "a", "answer": "yes"}])
    outside = tmp_path / "outside"
    (data_paths().jobs / real).rename(outside)
    (data_paths().jobs / "job_linked").symlink_to(outside, target_is_directory=True)
    store = Store(data_paths().database)
    bounded(lambda: store.ingest_all(data_paths().jobs))
    assert store.unreadable == {"job_linked": "the job folder is a symbolic link or not a folder"}
    assert store.query("SELECT count(*) AS n FROM jobs")["n"][0] == 0
    store.close()
    done = cli("jobs", "rename", "job_linked", "stolen")
    assert done.returncode == 2
    assert "job job_linked is unreadable: the job folder is a symbolic link" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (outside / "name.txt").exists()  # nothing written outside the data folder


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("link_input", "input.jsonl is a symbolic link (not followed)"),
        ("fifo_status", "status.json is a named pipe (FIFO), not a regular file (not read)"),
        ("fifo_extra", "notes.txt is a named pipe (FIFO), not a regular file (not read)"),
    ],
)
def test_an_odd_file_inside_a_job_folder_makes_that_job_unreadable_naming_it(
    studio_home, tmp_path, entry, reason
):
    job_id = job_in_home(studio_home, [{"custom_id": "a", "answer": "yes"}])
    folder = data_paths().jobs / job_id
    if entry == "link_input":
        outside = tmp_path / "secret.jsonl"
        outside.write_bytes((folder / "input.jsonl").read_bytes())
        (folder / "input.jsonl").unlink()
        (folder / "input.jsonl").symlink_to(outside)
    elif entry == "fifo_status":
        (folder / "status.json").unlink()
        os.mkfifo(folder / "status.json")
    else:
        os.mkfifo(folder / "notes.txt")
    store = Store(data_paths().database)
    bounded(lambda: store.ingest_all(data_paths().jobs))
    assert store.unreadable == {job_id: reason}
    store.close()
    with pytest.raises(JobUnreadable, match="unreadable: " + reason.split(" ", 1)[0]):
        bounded(lambda: JobFolder(folder).read_status())


def test_a_saved_rules_file_that_is_a_fifo_is_named_and_never_read(tmp_path: Path):
    folder = tmp_path / "job"
    folder.mkdir()
    os.mkfifo(folder / "rules.yaml")
    store = Store(tmp_path / "s.duckdb")
    store.execute(
        "INSERT INTO jobs (job_id, folder, state) VALUES ('j', ?, 'completed')", [str(folder)]
    )
    problems = bounded(lambda: grading.refresh(store, ["j"]))
    assert problems == {
        "j": "rules.yaml: rules.yaml is a named pipe (FIFO), not a regular file (not read)"
    }
    assert bounded(lambda: grading.saved_rules_text(folder)) is None
    store.close()
