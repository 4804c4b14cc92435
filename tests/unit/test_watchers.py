"""The UI's jobs watcher: a change that comes due after the app closed its store."""

from __future__ import annotations

from core.store.db import Store
from core.store.watchers import _JobsHandler
from tests.support.jobs import finished_job


def test_an_ingest_due_after_the_store_closed_is_dropped_without_a_traceback(tmp_path):
    job = finished_job(tmp_path, {"a": "answer a", "b": None})
    store = Store(tmp_path / "studio.duckdb")
    handler = _JobsHandler(store, job.path.parent)
    handler._changed(job.output)  # ingests now
    assert store.query("SELECT count(*) AS n FROM results")["n"][0] == 2
    store.close()  # the app stops while the watcher's debounce timer is due
    handler._ingest(job)  # was: duckdb ConnectionException in the timer's thread
