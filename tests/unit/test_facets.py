"""The Results filters' values kept per job in the index (core/store/facets.py) are always
what a fresh read of the results gives: after ingest, a resume, a retry and a delete."""

import shutil
import time

from core.store.db import Store
from core.store.facets import _read, keep_in_background
from core.store.results import facets
from tests.support.jobs import finished_job

ROWS = [
    {"custom_id": "a", "answer": "yes", "metadata": {"team": "x", "prompt_version": "v1"}},
    {"custom_id": "b", "answer": None},
    {"custom_id": "c", "answer": "z", "finish": "length", "metadata": {"lang": "en"}},
]


def fresh(store: Store, job_id: str) -> dict[str, list[str]]:
    """The filter values read from the results now, nothing kept."""
    with store.cursor() as cur:
        return _read(cur, job_id)


def kept_rows(store: Store) -> int:
    return store.query("SELECT count(*) AS n FROM job_facets")["n"].iloc[0]


def shown(store: Store, job_id: str) -> dict[str, list[str]]:
    values = facets(store, [job_id])
    assert values.pop("checks") == []
    assert values == fresh(store, job_id)
    return values


def test_kept_filter_values_equal_a_fresh_read_after_ingest_resume_retry_and_delete(tmp_path):
    job = finished_job(tmp_path, ROWS)
    output, errors = job.output.read_bytes(), job.errors.read_bytes()
    store = Store(tmp_path / "studio.duckdb")
    # Interrupted after its first answer: one line each.
    job.output.write_bytes(output.splitlines(keepends=True)[0])
    job.errors.write_bytes(b"")
    store.ingest(job)
    first = shown(store, job.job_id)
    assert first["statuses"] == ["succeeded"] and first["metadata_keys"] == [
        "prompt_version",
        "team",
    ]
    assert kept_rows(store) == 1 and shown(store, job.job_id) == first  # kept, read once

    job.output.write_bytes(output)  # resumed: the other lines come
    job.errors.write_bytes(errors)
    store.ingest(job)
    resumed = shown(store, job.job_id)
    assert resumed["statuses"] == ["failed", "succeeded"]
    assert resumed["finish_reasons"] == ["(none)", "length", "stop"]
    assert resumed["metadata_keys"] == ["lang", "prompt_version", "team"]
    assert resumed["prompt_versions"] == ["v1"]

    retried = finished_job(tmp_path / "retry", [{"custom_id": "b", "answer": "fixed"}])
    job.output.write_bytes(output + retried.output.read_bytes())  # the failure retried
    store.ingest(job)
    after_retry = shown(store, job.job_id)
    assert after_retry["statuses"] == ["succeeded"]  # no "failed" left to filter by
    assert after_retry["finish_reasons"] == ["length", "stop"]

    shutil.rmtree(job.path)  # deleted: its kept values go with its rows
    store.ingest_all(job.path.parent)
    assert kept_rows(store) == 0


def test_two_jobs_filter_values_are_each_jobs_united(tmp_path):
    one = finished_job(tmp_path / "one", ROWS[:1])
    two = finished_job(tmp_path / "two", ROWS[1:], model="other")
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(one)
    store.ingest(two)
    both = facets(store, [one.job_id, two.job_id])
    assert both["models"] == ["other", "tiny"]
    assert both["statuses"] == ["failed", "succeeded"]
    assert both["metadata_keys"] == ["lang", "prompt_version", "team"]


def test_an_ended_jobs_filter_values_are_read_after_its_ingest_and_a_running_ones_are_not(
    tmp_path,
):
    ended = finished_job(tmp_path / "ended", ROWS)
    running = finished_job(tmp_path / "running", ROWS)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(ended)
    store.ingest(running)
    with store.writing() as cur:  # as a job still running is indexed
        cur.execute("UPDATE jobs SET state = 'running' WHERE job_id = ?", [running.job_id])
    keep_in_background(store, running.job_id)
    keep_in_background(store, ended.job_id)
    for _ in range(500):  # read on a thread of its own
        kept = store.query("SELECT job_id FROM job_facets")["job_id"].tolist()
        if kept:
            break
        time.sleep(0.01)
    time.sleep(0.2)  # a running job's would have come by now too
    assert store.query("SELECT job_id FROM job_facets")["job_id"].tolist() == [ended.job_id]
