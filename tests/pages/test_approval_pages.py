"""The pages of approval for big jobs (issue 42 items 2 and 4): Settings keeps thresholds
and refuses a zero one or an unknown approver whole; Jobs shows why a job waits, with
Approve and Reject."""

from __future__ import annotations

import getpass

from core.config import data_paths
from core.jobs.approval import ApprovalSettings, read_settings, save_settings
from core.jobs.submit import Submission, submit
from core.schemas import EngineConfig
from tests.support.jobs import request_line
from tests.support.pages import open_page, shown, texts
from tests.support.submit import write

ME = getpass.getuser()


def _save(at):
    next(b for b in at.button if b.label == "Save approval settings").click().run()
    assert not at.exception, [e.message for e in at.exception]
    return [shown(e.value) for e in at.error]


def test_settings_keeps_thresholds_and_refuses_a_zero_one_or_an_unknown_approver(studio_home):
    at = open_page("settings.py")
    at.number_input(key="approve_lines").set_value(1000).run()
    at.number_input(key="approve_tokens").set_value(0).run()
    errors = _save(at)
    assert any("the estimated tokens threshold must be above 0 (got 0)" in e for e in errors)
    assert read_settings(data_paths().home) == ApprovalSettings()  # nothing half-set
    at.number_input(key="approve_tokens").set_value(None).run()
    at.text_input(key="approvers").input("alice").run()
    errors = _save(at)
    assert any("approver 'alice' does not exist here" in e for e in errors), errors
    at.text_input(key="approvers").input("").run()
    assert _save(at) == []
    assert read_settings(data_paths().home) == ApprovalSettings(lines=1000)


def _waiting(tmp_path, model, name: str):
    batch = write(tmp_path / f"{name}.jsonl", [request_line(f"r{i}", "hi") for i in range(3)])
    submission = Submission(engine=EngineConfig(model=str(model)), name=name)
    return submit(batch, submission, data_paths().jobs).job


def test_jobs_shows_why_a_job_waits_and_approves_or_rejects_it(
    studio_home, tmp_path, model, no_worker
):
    save_settings(data_paths().home, ApprovalSettings(lines=2))
    first = _waiting(tmp_path, model, "first")
    second = _waiting(tmp_path, model, "second")  # newest: the one Jobs opens
    at = open_page("jobs.py")
    said = texts(at)
    assert "awaiting approval: 3 lines is over the threshold of 2" in said
    assert f"Asked by user '{ME}'" in said and "3 lines, not counted tokens" in said
    next(b for b in at.button if b.label == "Reject").click().run()
    assert any("say why the job is rejected" in shown(e.value) for e in at.error)
    assert second.read_status().state == "awaiting_approval"
    at.text_input(key=f"reject-why-{second.job_id}").input("use the sample first").run()
    next(b for b in at.button if b.label == "Reject").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert second.read_status().error == f"rejected by {ME}: use the sample first"
    assert f"rejected by {ME}: use the sample first" in texts(at)

    at = open_page("jobs.py", job_id=first.job_id)
    next(b for b in at.button if b.label == "Approve").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert first.read_status().state == "queued"
    assert [j.job_id for j in no_worker] == [first.job_id]
