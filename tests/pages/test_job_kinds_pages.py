"""The pages tests of tests/unit/test_job_kinds.py (split from it by kind; docs/tests.md).

Every page that names a job's model or a finish reason knows what kind of job it is
(issue 30, item 3): an embeddings job is named by its embedding model, its vectors are no
failures, and a typed text is embedded by the model the job used."""

from __future__ import annotations

from tests.support.jobs import finished_embedding_job, finished_job


def test_the_monitor_describes_a_finished_embeddings_job_by_its_vectors(studio_home) -> None:
    from tests.support.pages import open_page, texts

    requests = [{"custom_id": f"e{i}", "input": "text", "vectors": [[0.1, 0.2]]} for i in range(3)]
    job = finished_embedding_job(studio_home, requests)
    status = job.read_status()
    status.embedded = 3
    job.write_status(status)
    at = open_page("monitor.py", job_id=job.job_id)
    assert "completed: 3 succeeded, 0 failed, 3 texts embedded in" in texts(at)
    assert "output tokens" not in texts(at)
    assert set(at.dataframe[0].value["answer"]) == {"(1 vector)"}


def test_the_job_chosen_on_one_page_is_the_job_of_the_next(studio_home) -> None:
    """Issue 30, item 12: Review, Checks and Results reset to the newest job."""
    from tests.support.pages import open_page

    first = finished_job(studio_home, {"a": "yes"}, name="first.jsonl")
    second = finished_job(studio_home, {"a": "no"}, name="second.jsonl")
    older = min(first, second, key=lambda job: job.job_id)  # pages list the newest first
    at = open_page("results.py")
    at.selectbox(key="results_job").set_value(older.job_id).run()
    at.switch_page("pages/checks.py").run()
    assert at.multiselect(key="checks_jobs").value == [older.job_id]
    at.switch_page("pages/review.py").run()
    assert not at.exception
    assert at.multiselect[0].value == [older.job_id]
    at.switch_page("pages/monitor.py").run()
    assert at.selectbox[0].value == older.job_id
