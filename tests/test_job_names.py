"""Jobs have names: made once at submit, renamed from Jobs or the CLI, shown everywhere.

A job's name is user text: it is tidied (no control characters, one line), at most
``NAME_MAX`` characters, never empty when given, and shown as text. A job made before
names shows its id.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.config import REPO_ROOT, data_paths
from core.jobs.folder import JobFolder, JobUnreadable, list_jobs
from core.jobs.submit import Refused, Submission, submit
from core.schemas import NAME_MAX, EngineConfig, JobSpec, job_label, tidy_name
from core.store.db import Store
from core.store.schema import MIGRATIONS
from core.store.watchers import _JobsHandler
from tests.support.cli import run_cli
from tests.support.jobs import finished_job, request_line
from tests.support.pages import open_page, shown
from ui.handover import CheckedBatch

OLD_JOB = REPO_ROOT / "tests" / "data" / "job_20261201_102504_e41d7b"
HOSTILE = "**x** <b>y</b> [a](http://127.0.0.1:9/x)\nsecond line\x1b[31m\u202e"

pytestmark = pytest.mark.usefixtures("studio_home")


def batch(path: Path, version: str | None = None, lines: int = 3) -> Path:
    metadata = {"metadata": {"task": "t", "prompt_version": version}} if version else {}
    rows = [request_line(f"t:{i}", f"prompt {i}", **metadata) for i in range(lines)]
    path.write_text("".join(row + "\n" for row in rows), encoding="utf-8")
    return path


def submitted(file: Path, model: Path, **options: object) -> JobFolder:
    submission = Submission(engine=EngineConfig(model=str(model)), **options)
    return submit(file, submission, data_paths().jobs).job


# -- the name made at submit ------------------------------------------------------------------


def test_the_default_name_is_the_file_and_the_builders_prompt_version(tmp_path, model, no_worker):
    job = submitted(batch(tmp_path / "tickets.jsonl", "v2"), model)
    assert job.read_spec().name == job.name == "tickets, prompt v2"
    assert job_label(job.job_id, job.name) == f"tickets, prompt v2 · {job.job_id[-6:]}"


def test_without_a_prompt_version_the_name_is_the_files_and_an_upload_keeps_its_own(
    tmp_path, model, no_worker
):
    assert submitted(batch(tmp_path / "tickets.jsonl"), model).name == "tickets"
    # An upload is saved under another file name; the name the user uploaded wins.
    upload = batch(tmp_path / "upload-3f2a.jsonl", "v1")
    assert submitted(upload, model, source="reviews.jsonl").name == "reviews, prompt v1"
    assert submitted(upload, model, source="inbox/drop.jsonl").name == "drop, prompt v1"


def test_mixed_prompt_versions_name_no_version(tmp_path, model, no_worker):
    file = batch(tmp_path / "mixed.jsonl", "v1")
    with file.open("a") as handle:
        handle.write(request_line("t:9", "p", metadata={"prompt_version": "v2"}) + "\n")
    assert submitted(file, model).name == "mixed"


def test_a_given_name_wins_and_a_bad_one_is_refused_with_nothing_made(tmp_path, model, no_worker):
    file = batch(tmp_path / "tickets.jsonl", "v1")
    assert submitted(file, model, name="  March  refunds\n").name == "March refunds"
    for bad, reason in (("", "cannot be empty"), ("x" * (NAME_MAX + 1), "at most 120")):
        with pytest.raises(Refused) as refused:
            submitted(file, model, name=bad)
        assert any(reason in problem for problem in refused.value.problems)
    assert len(list_jobs(data_paths().jobs)) == 1


def test_a_name_another_job_has_gets_a_number_so_two_jobs_never_share_one(
    tmp_path, model, no_worker
):
    """Issue 38, item 14: two different jobs were both named "cancel100"."""
    file = batch(tmp_path / "tickets.jsonl")
    names = [submitted(file, model, name="cancel100").name for _ in range(3)]
    assert names == ["cancel100", "cancel100 (2)", "cancel100 (3)"]
    assert submitted(file, model, name="CANCEL100").name == "CANCEL100 (4)"  # case aside
    # Names made from the file too: the second run of a file is told apart.
    assert [submitted(file, model).name for _ in range(2)] == ["tickets", "tickets (2)"]
    long = "x" * NAME_MAX
    assert submitted(file, model, name=long).name == long
    assert submitted(file, model, name=long).name == "x" * (NAME_MAX - 4) + " (2)"


def test_a_rename_to_another_jobs_name_is_refused_naming_it(tmp_path, model, no_worker):
    file = batch(tmp_path / "tickets.jsonl")
    first = submitted(file, model, name="cancel100")
    second = submitted(file, model, name="other")
    refused = run_cli("jobs", "rename", second.job_id, "Cancel100")
    assert refused.returncode == 2
    assert f"job {first.job_id} is already named 'Cancel100'" in refused.stderr
    assert second.name == "other"
    done = run_cli("jobs", "rename", first.job_id, "CANCEL100")  # its own name, recased
    assert done.returncode == 0, done.stderr
    at = open_page("jobs.py", job_id=second.job_id)
    rename(at, second, "cancel100")
    assert any("is already named 'cancel100'" in shown(e.value) for e in at.error)
    assert second.name == "other"


# -- renaming -----------------------------------------------------------------------------


def test_rename_from_the_cli_keeps_job_json_and_reaches_the_index(studio_home):
    job = finished_job(studio_home, {"a": "yes"})
    spec_before = job.spec_file.read_bytes()
    store = Store(data_paths().database)
    store.ingest(job)
    assert store.job_names() == {job.job_id: ""}

    done = run_cli("jobs", "rename", job.job_id, "Refund answers, try 2")
    assert done.returncode == 0, done.stderr
    assert job.name == "Refund answers, try 2"
    assert job.spec_file.read_bytes() == spec_before  # job.json is written once
    # The UI's watcher ingests the job when its name file changes.
    _JobsHandler(store, data_paths().jobs)._changed(job.name_file)
    assert store.job_names() == {job.job_id: "Refund answers, try 2"}
    store.close()

    listed = run_cli("jobs", "list")
    assert f"{job.job_id}  completed" in listed.stdout
    assert "Refund answers, try 2" in listed.stdout
    [row] = json.loads(run_cli("jobs", "list", "--json").stdout)
    assert (row["job_id"], row["name"]) == (job.job_id, "Refund answers, try 2")

    refused = run_cli("jobs", "rename", job.job_id, " \n\t")
    assert refused.returncode == 2 and "cannot be empty" in refused.stderr
    refused = run_cli("jobs", "rename", job.job_id, "x" * 500)
    assert refused.returncode == 2 and "at most 120 characters; this one has 500" in refused.stderr
    assert job.name == "Refund answers, try 2"


def rename(at, job: JobFolder, name: str) -> None:
    """Types a name into the Jobs page's rename form and submits it (one run, as a form
    sends its fields with its button)."""
    at.text_input(key=f"name-{job.job_id}").input(name)
    next(b for b in at.button if b.label == "Rename").click()
    at.run()


def test_rename_on_the_jobs_page(studio_home):
    job = finished_job(studio_home, {"a": "yes"})
    at = open_page("jobs.py", job_id=job.job_id)
    assert at.selectbox[0].options == [job.job_id]  # no name yet: the id
    rename(at, job, "Nightly tickets")
    assert not at.exception
    assert job.name_file.read_text() == "Nightly tickets\n"
    label = f"Nightly tickets · {job.job_id[-6:]}"
    assert at.selectbox[0].options == [label]
    assert any(shown(h.value).startswith(label) for h in at.subheader)
    assert "Nightly tickets" in list(at.dataframe[0].value["name"])

    rename(at, job, "   ")
    assert any("cannot be empty" in shown(e.value) for e in at.error)
    assert job.name == "Nightly tickets"


def test_a_hostile_name_is_kept_on_one_line_and_shown_as_text(studio_home):
    job = finished_job(studio_home, {"a": "yes"})
    kept = job.rename(HOSTILE)
    assert kept == "**x** <b>y</b> [a](http://127.0.0.1:9/x) second line [31m"
    assert "\n" not in job.name_file.read_text().rstrip("\n")
    at = open_page("jobs.py", job_id=job.job_id)
    label = f"{kept} · {job.job_id[-6:]}"
    assert at.selectbox[0].options == [label]  # a widget's option: plain text as it is
    [heading] = [h.value for h in at.subheader if job.job_id[-6:] in shown(h.value)]
    assert shown(heading) == f"{label}: completed"  # what a person reads: the text itself
    assert "<b>" not in heading and "**x**" not in heading and "](http" not in heading


def test_a_long_stored_name_is_cut_and_control_characters_dropped_on_reading(studio_home):
    job = finished_job(studio_home, {"a": "yes"})
    job.name_file.write_text("y" * 500 + "\n\x07")
    assert job.name == "y" * NAME_MAX
    data = json.loads(job.spec_file.read_text())
    spec = JobSpec.model_validate({**data, "name": "a\tb\x00c" + "z" * 300})
    assert spec.name == ("a b c" + "z" * 300)[:NAME_MAX]
    assert tidy_name("\u202eevil\u200d👍\u2028x") == "evil\u200d👍 x"
    job.name_file.unlink()
    job.name_file.mkdir()  # a name file that cannot be read: that job's problem only
    with pytest.raises(JobUnreadable, match=r"name\.txt"):
        job.name  # noqa: B018
    db = Store(data_paths().database)
    db.ingest_all(data_paths().jobs)
    assert "name.txt" in db.unreadable[job.job_id]
    db.close()


def test_an_old_job_without_a_name_shows_its_id():
    jobs = data_paths().jobs
    shutil.copytree(OLD_JOB, jobs / OLD_JOB.name)
    job = JobFolder(jobs / OLD_JOB.name)
    assert "name" not in json.loads(job.spec_file.read_text())
    assert job.name == "" and job_label(job.job_id, job.name) == OLD_JOB.name
    at = open_page("jobs.py", job_id=OLD_JOB.name)
    assert at.selectbox[0].options == [OLD_JOB.name]


# -- the name where jobs are picked ---------------------------------------------------------------


def two_named_jobs(home: Path) -> tuple[JobFolder, JobFolder]:
    first = finished_job(home, {"a": "one", "b": "two"})
    second = finished_job(home, {"a": "uno", "b": "dos"})
    first.rename("English answers")
    second.rename("Spanish answers")
    return first, second


def test_compare_and_monitor_pick_jobs_by_name(studio_home):
    first, second = two_named_jobs(studio_home)
    labels = {f"English answers · {first.job_id[-6:]}", f"Spanish answers · {second.job_id[-6:]}"}
    at = open_page("compare.py")
    assert set(at.selectbox(key="cmp_a").options) == labels
    assert set(at.selectbox(key="cmp_b").options) == labels
    assert {shown(h.value).split(" · ", 1)[1] for h in at.subheader} == labels
    # Both jobs ran alike: the page says so before any answer (issue 30, item 13).
    assert any("The same models, prompt versions" in c.value for c in at.caption)

    at = open_page("monitor.py", job_id=first.job_id)  # jobs not indexed: read from folders
    assert set(at.selectbox[0].options) == labels
    assert at.selectbox[0].value == first.job_id


def test_results_dashboards_and_review_pick_jobs_by_name(studio_home):
    first, second = two_named_jobs(studio_home)
    at = open_page("results.py", job_id=first.job_id)
    picked = at.selectbox(key="results_job")
    assert picked.value == first.job_id
    assert picked.options[picked.index] == f"English answers · {first.job_id[-6:]}"
    assert at.multiselect(key="results_more_jobs").options == [
        f"Spanish answers · {second.job_id[-6:]}"
    ]
    at = open_page("dashboards.py")
    assert len(at.multiselect(key="dash_jobs").options) == 2
    assert all(" answers · " in o for o in at.multiselect(key="dash_jobs").options)
    at = open_page("review.py")
    assert all(" answers · " in o for o in at.multiselect[0].options)


def test_an_index_made_before_names_gets_them_at_the_next_ingest(studio_home):
    job = finished_job(studio_home, {"a": "yes"})
    job.rename("Before the upgrade")
    db = Store(data_paths().database)
    db.ingest(job)
    # pretend the names migration never ran
    version = next(n for n, sql in enumerate(MIGRATIONS, 1) if "jobs ADD COLUMN name" in sql)
    db.execute("ALTER TABLE jobs DROP COLUMN name")
    db.execute("DELETE FROM schema_migrations WHERE version = ?", [version])
    db.close()
    db = Store(data_paths().database)
    assert db.job_names() == {job.job_id: ""}
    db.ingest_all(data_paths().jobs)
    assert db.job_names() == {job.job_id: "Before the upgrade"}
    db.close()


def test_the_run_page_shows_the_default_name_and_a_typed_name_wins(tmp_path, model, no_worker):
    file = batch(tmp_path / "upload-1.jsonl", "v3")
    at = open_page("run.py", checked_batch=CheckedBatch(file, "tickets.jsonl"))
    assert at.text_input(key="run_job_name").placeholder == "tickets, prompt v3"
    at.selectbox(key="model_choice").set_value("Another folder…").run()
    at.text_input(key="model_path").input(str(model)).run()
    at.text_input(key="run_job_name").input("Ticket triage\ttrial").run()
    at.button[0].click().run()
    [job] = list_jobs(data_paths().jobs)
    assert job.name == "Ticket triage trial"
    assert at.session_state["job_id"] == job.job_id


def test_dashboards_group_jobs_by_the_same_label_as_the_pickers(studio_home):
    from core.store.dashboards import Scope, summary, throughput_figure

    named = finished_job(studio_home, {"a": "yes"})
    named.rename("English · answers")
    unnamed = finished_job(studio_home, {"b": "no"})
    db = Store(data_paths().database)
    db.ingest_all(data_paths().jobs)
    expected = {job_label(j.job_id, j.name) for j in (named, unnamed)}
    assert set(summary(db, Scope(), "job")["job"]) == expected
    assert unnamed.job_id in expected  # a job without a name: its id
    figure = throughput_figure(db, Scope())
    assert {str(x) for trace in figure.data for x in trace.x} == expected
    db.close()
