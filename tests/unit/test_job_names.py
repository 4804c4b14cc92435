"""Jobs have names: made once at submit, renamed from Jobs or the CLI, shown everywhere.

A job's name is user text: it is tidied (no control characters, one line), at most
``NAME_MAX`` characters, never empty when given, and shown as text. A job made before
names shows its id.
"""

from __future__ import annotations

import json

import pytest

from core.config import data_paths
from core.jobs.folder import JobUnreadable, list_jobs
from core.jobs.submit import Refused
from core.schemas import NAME_MAX, JobSpec, job_label, tidy_name
from core.store.db import Store
from core.store.schema import MIGRATIONS
from core.store.watchers import _JobsHandler
from tests.support.cli import cli
from tests.support.job_names import batch, submitted
from tests.support.jobs import finished_job, request_line

pytestmark = pytest.mark.usefixtures("studio_home")


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


def test_rename_from_the_cli_keeps_job_json_and_reaches_the_index(studio_home):
    job = finished_job(studio_home, {"a": "yes"})
    spec_before = job.spec_file.read_bytes()
    store = Store(data_paths().database)
    store.ingest(job)
    assert store.job_names() == {job.job_id: ""}

    done = cli("jobs", "rename", job.job_id, "Refund answers, try 2")
    assert done.returncode == 0, done.stderr
    assert job.name == "Refund answers, try 2"
    assert job.spec_file.read_bytes() == spec_before  # job.json is written once
    # The UI's watcher ingests the job when its name file changes.
    _JobsHandler(store, data_paths().jobs)._changed(job.name_file)
    assert store.job_names() == {job.job_id: "Refund answers, try 2"}
    store.close()

    listed = cli("jobs", "list")
    assert f"{job.job_id}  completed" in listed.stdout
    assert "Refund answers, try 2" in listed.stdout
    [row] = json.loads(cli("jobs", "list", "--json").stdout)
    assert (row["job_id"], row["name"]) == (job.job_id, "Refund answers, try 2")

    refused = cli("jobs", "rename", job.job_id, " \n\t")
    assert refused.returncode == 2 and "cannot be empty" in refused.stderr
    refused = cli("jobs", "rename", job.job_id, "x" * 500)
    assert refused.returncode == 2 and "at most 120 characters; this one has 500" in refused.stderr
    assert job.name == "Refund answers, try 2"


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
