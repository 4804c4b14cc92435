"""The DuckDB index: migrations and idempotent ingest from job folders."""

from core.jobs.ledger import verify
from core.store.db import Store
from core.store.results import detail
from core.store.schema import MIGRATIONS
from tests.support.jobs import finished_job


def test_migrations_run_once_and_record_their_version(tmp_path):
    db = tmp_path / "studio.duckdb"
    Store(db).close()
    store = Store(db)  # a second start applies nothing again
    assert store.schema_version == len(MIGRATIONS)


def test_ingest_brings_results_with_their_prompts(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": None, "c": "<b>bold</b>"})
    store = Store(tmp_path / "studio.duckdb")
    assert store.ingest(job) == 3
    rows = store.results(job.job_id).set_index("custom_id")
    assert rows.loc["a", "answer"] == "yes" and rows.loc["a", "prompt"] == "prompt a"
    assert rows.loc["b", "status"] == "failed"
    assert rows.loc["b", "error_message"] == "prompt too long"
    assert rows.loc["c", "answer"] == "<b>bold</b>"
    job_row = store.jobs().set_index("job_id").loc[job.job_id]
    assert (job_row["state"], job_row["succeeded"], job_row["failed"]) == (
        "completed with errors",
        2,
        1,
    )


def test_ingesting_twice_changes_nothing(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": "no"})
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    assert store.ingest(job) == 0
    assert store.count_results(job.job_id) == 2


def test_only_new_complete_lines_are_read_and_a_torn_tail_waits(tmp_path):
    job = finished_job(tmp_path, {"a": "yes"})
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    extra = finished_job(tmp_path / "other", {"b": "later"}).output.read_bytes()
    with job.output.open("ab") as handle:
        handle.write(extra + b'{"custom_id": "c", "torn')
    assert store.ingest(job) == 1
    assert store.count_results(job.job_id) == 2


def test_a_pages_ingest_reads_only_the_job_folders_that_changed(tmp_path, monkeypatch):
    from core.jobs.folder import JobFolder

    quiet = finished_job(tmp_path / "q", {"a": "yes"})
    busy = finished_job(tmp_path / "b", {"a": "yes"})
    busy.path.rename(quiet.path.parent / busy.job_id)
    busy = JobFolder(quiet.path.parent / busy.job_id)
    store = Store(tmp_path / "studio.duckdb")
    assert store.ingest_all(quiet.path.parent) == 2
    read: list[str] = []
    spec = JobFolder.read_spec
    monkeypatch.setattr(JobFolder, "read_spec", lambda job: read.append(job.job_id) or spec(job))
    assert store.ingest_all(quiet.path.parent) == 0  # a rerun: nothing changed, nothing read
    assert read == []
    extra = finished_job(tmp_path / "other", {"b": "later"}).output.read_bytes()
    with busy.output.open("ab") as handle:
        handle.write(extra)
    read.clear()
    assert store.ingest_all(quiet.path.parent) == 1
    assert set(read) == {busy.job_id}
    assert store.count_results(busy.job_id) == 2


def test_a_deleted_database_is_rebuilt_from_the_job_folders(tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": "no"})
    store = Store(tmp_path / "studio.duckdb")
    store.ingest_all(tmp_path / "jobs")
    store.close()
    (tmp_path / "studio.duckdb").unlink()
    rebuilt = Store(tmp_path / "studio.duckdb")
    assert rebuilt.ingest_all(tmp_path / "jobs") == 2
    assert list(rebuilt.results(job.job_id)["custom_id"]) == ["a", "b"]


def test_a_retried_success_replaces_the_failure_and_never_the_reverse(tmp_path):
    job = finished_job(tmp_path, {"a": None})
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    retried = finished_job(tmp_path / "retry", {"a": "fixed"})
    job.output.write_bytes(retried.output.read_bytes())
    store.ingest(job)
    assert store.results(job.job_id).set_index("custom_id").loc["a", "status"] == "succeeded"
    with job.errors.open("ab") as handle:  # an older failure read later must not win
        handle.write(job.errors.read_bytes())
    store.ingest(job)
    assert store.results(job.job_id).set_index("custom_id").loc["a", "answer"] == "fixed"


def test_latency_is_ingested_where_a_line_has_it_and_null_where_it_does_not(tmp_path):
    job = finished_job(tmp_path, {"new": "yes", "old": "yes", "bad": None}, {"new": 1234})
    written = job.output.read_bytes()
    assert b'"error": null, "latency_ms": 1234, "chain_sha256": "' in written  # chain last
    assert written.count(b"latency_ms") == 1
    assert verify(job).ok
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    assert detail(store, job.job_id, "new")["latency_ms"] == 1234
    assert detail(store, job.job_id, "old")["latency_ms"] is None
    assert detail(store, job.job_id, "bad")["latency_ms"] is None


def test_a_long_read_of_one_session_does_not_hold_up_a_short_read_of_another(tmp_path):
    import contextlib
    import threading
    import time

    import duckdb

    store = Store(tmp_path / "studio.duckdb")
    endless: list[duckdb.DuckDBPyConnection] = []

    def long_read() -> None:  # one person's huge export or scan, in its session's thread
        with store.cursor() as cur:
            endless.append(cur)
            with contextlib.suppress(duckdb.InterruptException):  # interrupted below
                cur.execute("SELECT count(*) FROM range(1e15::BIGINT) t(i) WHERE hash(i) % 7 = 0")

    reader = threading.Thread(target=long_read)
    reader.start()
    while not endless:
        time.sleep(0.01)
    time.sleep(0.3)  # the long read is running
    short = threading.Thread(target=store.jobs)  # another person's page
    short.start()
    short.join(timeout=10)
    short_done, long_running = not short.is_alive(), reader.is_alive()
    endless[0].interrupt()
    reader.join()
    short.join()
    assert long_running and short_done  # the short read ran beside the long one


def test_sessions_saving_the_same_label_at_once_all_succeed(tmp_path):
    import threading

    from core.store.review import Label, save_label

    job = finished_job(tmp_path, {"a": "yes", "b": "no"})
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    failures: list[BaseException] = []

    def reviewer(k: int) -> None:
        # Same item, same reviewer: each save replaces the same row, which DuckDB refuses
        # to do from two transactions at once unless the store takes them in turn.
        for n in range(20):
            try:
                save_label(store, job.job_id, "a", "ann", Label("pass" if n % 2 else "fail"))
            except BaseException as exc:  # reported below
                failures.append(exc)

    threads = [threading.Thread(target=reviewer, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(store.query("SELECT * FROM reviews")) == 1


def test_a_failed_line_counts_under_the_model_its_body_names(tmp_path, default_model):
    """A failed line carries no model: it counts under the name its body.model maps to (a
    LoRA adapter's own), else under the job's model, never the job's list of models
    (issue 59 item 2)."""
    from tests.support.lora import make_adapter

    adapter = make_adapter(tmp_path / "tuned", default_model)
    model_map = {default_model.name: str(default_model), "ft-a": str(adapter)}
    rows = [
        {"custom_id": "base-ok", "model": default_model.name, "answer": "yes"},
        {"custom_id": "ft-a-failed", "model": "ft-a", "answer": None},
        {"custom_id": "unmapped-failed", "model": "gpt-x", "answer": None},
    ]
    job = finished_job(tmp_path, rows, model=default_model, model_map=model_map)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    models = store.query("SELECT custom_id, model FROM results ORDER BY 1")
    assert dict(zip(models["custom_id"], models["model"], strict=True)) == {
        "base-ok": default_model.name,
        "ft-a-failed": "ft-a",
        "unmapped-failed": default_model.name,  # mapped nowhere: the job's model
    }
