"""The pages tests of tests/unit/test_s3.py (split from it by kind; docs/tests.md).

Object storage in and out (``s3://``), against a local S3 server (moto) the tests start.

The fast tests drive core/storage/s3.py, the delivery of a job's results and the worker
that delivers them; the one marked ``engine`` runs ``core run s3://... -o s3://...`` on the
real engine."""

from __future__ import annotations

from core.config import REPO_ROOT
from tests.support.jobs import finished_job, request_line
from tests.support.pages import shown
from tests.support.s3 import BUCKET, _drop_bucket


def _page(page: str, **state: object) -> object:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60).run()
    for key, value in state.items():
        at.session_state[key] = value
    at.switch_page(f"pages/{page}").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_run_page_fetches_an_object_and_starts_a_job_that_writes_to_one(
    s3, studio_home, default_model, no_worker
):
    lines = [request_line(f"r{i}", f"Say {i}.", max_tokens=4) for i in range(3)]
    s3.put_object(Bucket=BUCKET, Key="in.jsonl", Body=("\n".join(lines) + "\n").encode())
    at = _page("run.py")
    at.text_input(key="run_input_uri").input("s3://gone/in.jsonl").run()
    at.button(key="run_fetch").click().run()
    assert "cannot read s3://gone/in.jsonl: the bucket 'gone' does not exist" in shown(
        at.error[0].value
    )
    at.text_input(key="run_input_uri").input(f"s3://{BUCKET}/in.jsonl").run()
    at.button(key="run_fetch").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert "**s3://batches/in.jsonl**: 3 valid of 3 lines" in [shown(m.value) for m in at.markdown]
    # A results URI that names no object is refused in words, and no job is made.
    at.text_input(key="run_output_uri").input("s3://batches").run()
    next(b for b in at.button if b.label == "Start run").click().run()
    assert "names no object" in shown(at.error[0].value) and not no_worker
    at.text_input(key="run_output_uri").input(f"s3://{BUCKET}/out.jsonl").run()
    next(b for b in at.button if b.label == "Start run").click().run()
    (job,) = no_worker
    spec = job.read_spec()
    assert spec.output_path == f"s3://{BUCKET}/out.jsonl" and spec.input_lines == 3
    assert job.input.read_text().splitlines() == lines


def test_monitor_says_where_the_results_went_or_why_not(s3, studio_home):
    done = finished_job(studio_home, {"a": "yes"}, output_path=f"s3://{BUCKET}/o.jsonl")
    _drop_bucket(s3)
    kept = finished_job(studio_home / "2", {"a": "yes"}, output_path=f"s3://{BUCKET}/p.jsonl")
    kept.path.rename(studio_home / "jobs" / kept.job_id)  # beside the first, as the app has them
    at = _page("monitor.py", job_id=done.job_id)
    assert "Results written to s3://batches/o.jsonl, failures beside it in " in shown(
        " ".join(c.value for c in at.caption)
    )
    assert not at.warning
    at = _page("monitor.py", job_id=kept.job_id)
    warning = shown(" ".join(w.value for w in at.warning))
    assert "cannot write s3://batches/p.jsonl: the bucket 'batches' does not exist" in warning
    assert f"core resume {kept.job_id}" in warning
