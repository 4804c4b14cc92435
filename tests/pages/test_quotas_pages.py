"""The pages tests of tests/unit/test_quotas.py (issue 41 item 3): Settings sets a quota,
and Run's Start is refused with the message the API and the CLI give."""

from __future__ import annotations

import getpass

import streamlit as st

from core.jobs.folder import create_job, list_jobs
from core.jobs.quotas import Quota, quota_of
from core.schemas import EngineConfig
from tests.support.jobs import request_line
from tests.support.pages import open_page, shown
from ui.handover import CheckedBatch


def test_settings_sets_a_quota_and_run_says_why_start_is_refused(
    studio_home, tmp_path, model, no_worker
):
    st.cache_resource.clear()
    me = getpass.getuser()
    at = open_page("settings.py")
    assert at.selectbox(key="quota_owner").value == f"you ({me})"
    at.number_input(key=f"quota_running_jobs_user:{me}").set_value(1).run()
    next(b for b in at.button if b.label == "Save quota").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert quota_of(studio_home, f"user:{me}") == Quota(running_jobs=1)
    table = next(d.value for d in at.dataframe if "owner" in d.value.columns)
    assert list(table["owner"]) == [f"you ({me})"] and list(table["Running jobs"]) == [1]

    batch = tmp_path / "b.jsonl"
    batch.write_text(request_line("a", "hi", max_tokens=4) + "\n")
    earlier = create_job(batch, studio_home / "jobs", EngineConfig(model=str(model)))  # unended
    at = open_page("run.py", checked_batch=CheckedBatch(batch, batch.name))
    at.selectbox(key="model_choice").set_value("Another folder…").run()
    at.text_input(key="model_path").input(str(model)).run()
    next(b for b in at.button if b.label == "Start run").click().run()
    assert not at.exception, [e.message for e in at.exception]
    errors = [shown(e.value) for e in at.error]
    assert any(
        f"quota of user '{me}' reached: running jobs: at most 1" in e
        and "when one of your 1 running jobs ends" in e
        for e in errors
    ), errors
    assert [j.job_id for j in list_jobs(studio_home / "jobs")] == [earlier.job_id]
    assert not no_worker
    st.cache_resource.clear()
