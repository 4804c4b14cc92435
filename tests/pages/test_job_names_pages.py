"""The pages tests of tests/unit/test_job_names.py (split from it by kind; docs/tests.md).

Jobs have names: made once at submit, renamed from Jobs or the CLI, shown everywhere.

A job's name is user text: it is tidied (no control characters, one line), at most
``NAME_MAX`` characters, never empty when given, and shown as text. A job made before
names shows its id."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.config import REPO_ROOT, data_paths
from core.jobs.folder import JobFolder, list_jobs
from core.schemas import job_label
from tests.support.cli import cli
from tests.support.job_names import batch, submitted
from tests.support.jobs import finished_job
from tests.support.pages import open_page, shown
from ui.handover import CheckedBatch

pytestmark = pytest.mark.usefixtures("studio_home")

OLD_JOB = REPO_ROOT / "tests" / "data" / "job_20261201_102504_e41d7b"


HOSTILE = "**x** <b>y</b> [a](http://127.0.0.1:9/x)\nsecond line\x1b[31m\u202e"


def test_a_rename_to_another_jobs_name_is_refused_naming_it(tmp_path, model, no_worker):
    file = batch(tmp_path / "tickets.jsonl")
    first = submitted(file, model, name="cancel100")
    second = submitted(file, model, name="other")
    refused = cli("jobs", "rename", second.job_id, "Cancel100")
    assert refused.returncode == 2
    # The other job by its name as it has it (issue 58, item 17: by id, and as typed).
    assert f"another job is named 'cancel100' (job {first.job_id})" in refused.stderr
    assert second.name == "other"
    done = cli("jobs", "rename", first.job_id, "CANCEL100")  # its own name, recased
    assert done.returncode == 0, done.stderr
    at = open_page("jobs.py", job_id=second.job_id)
    rename(at, second, "cancel100")
    assert any("another job is named 'CANCEL100'" in shown(e.value) for e in at.error)
    assert second.name == "other"


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


def test_an_old_job_without_a_name_shows_its_id():
    jobs = data_paths().jobs
    shutil.copytree(OLD_JOB, jobs / OLD_JOB.name)
    job = JobFolder(jobs / OLD_JOB.name)
    assert "name" not in json.loads(job.spec_file.read_text())
    assert job.name == "" and job_label(job.job_id, job.name) == OLD_JOB.name
    at = open_page("jobs.py", job_id=OLD_JOB.name)
    assert at.selectbox[0].options == [OLD_JOB.name]


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
    # The table of both jobs names each row's job as the boxes do (issue 58, item 17: ids).
    at.multiselect(key="results_more_jobs").set_value([second.job_id]).run()
    [table] = [d.value for d in at.dataframe if "job" in d.value.columns]
    assert set(table["job"]) == {
        f"English answers · {first.job_id[-6:]}",
        f"Spanish answers · {second.job_id[-6:]}",
    }
    assert "job_id" not in table.columns
    at = open_page("dashboards.py")
    assert len(at.multiselect(key="dash_jobs").options) == 2
    assert all(" answers · " in o for o in at.multiselect(key="dash_jobs").options)
    at = open_page("review.py")
    assert all(" answers · " in o for o in at.multiselect[0].options)


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
