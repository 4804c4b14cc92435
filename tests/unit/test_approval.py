"""Approval for big jobs (issue 42 items 2 and 4): a job over a threshold waits in
``awaiting_approval`` with no worker until a person allowed to approve decides; the Batch
API shows it ``validating`` with metadata saying why, and a rejection ends it ``failed``
with the reason in ``errors``. Bad settings are refused whole."""

from __future__ import annotations

import getpass

import pytest

from core.access import AccessConfig, access_config
from core.config import data_paths
from core.jobs.approval import (
    ApprovalProblem,
    ApprovalSettings,
    check_settings,
    read_request,
    read_settings,
    save_settings,
)
from core.jobs.folder import cancel
from core.jobs.queue import queued_jobs
from core.jobs.submit import Refused, Submission, approve, reject, resubmit, submit
from core.schemas import EngineConfig
from tests.support.api import chats, sdk
from tests.support.cli import cli
from tests.support.jobs import request_line
from tests.support.submit import write

ME = getpass.getuser()
LOCAL = AccessConfig()  # no sign-in: this machine's user approves
SIGNED_IN = AccessConfig(True, ("@example.com",), ("boss@example.com",))


def _submit(tmp_path, model, lines: int = 3):
    batch = write(tmp_path / "b.jsonl", [request_line(f"r{i}", "hi") for i in range(lines)])
    return submit(batch, Submission(engine=EngineConfig(model=str(model))), data_paths().jobs)


def test_a_job_over_the_lines_threshold_waits_and_no_worker_starts(
    studio_home, tmp_path, model, no_worker
):
    save_settings(data_paths().home, ApprovalSettings(lines=2))
    started = _submit(tmp_path, model)
    job = started.job
    status = job.read_status()
    assert status.state == "awaiting_approval" and status.display_state == "awaiting approval"
    assert "3 lines is over the threshold of 2" in status.message
    assert f"Asked by user '{ME}'" in status.message
    assert no_worker == [] and started.worker is None
    assert queued_jobs(data_paths().jobs) == []  # a resident worker's scan never picks it
    assert not status.interrupted  # no worker, no heartbeat: still not a dead worker's job
    request = read_request(job)
    assert request.estimate.lines == 3 and request.estimate.tokens is None  # no tokenizer
    with pytest.raises(Refused, match="awaits approval"):
        resubmit(job)  # Resume never goes round it
    # A job within the threshold runs as before.
    within = _submit(tmp_path, model, lines=2).job
    assert [j.job_id for j in no_worker] == [within.job_id]


def test_approval_queues_the_job_and_starts_its_worker(studio_home, tmp_path, model, no_worker):
    save_settings(data_paths().home, ApprovalSettings(lines=1))
    job = _submit(tmp_path, model).job
    with pytest.raises(Refused, match="may not approve: without sign-in, this machine's user"):
        approve(job, "mallory", LOCAL)
    assert job.read_status().state == "awaiting_approval" and no_worker == []
    approve(job, ME, LOCAL)
    assert job.read_status().state == "queued" and no_worker == [job]
    assert read_request(job).decision.by == ME
    assert [j.job_id for j in queued_jobs(data_paths().jobs)] == [job.job_id]
    with pytest.raises(Refused, match="not awaiting approval"):
        approve(job, ME, LOCAL)


def test_a_rejection_fails_the_job_with_the_reason_and_it_never_runs(
    studio_home, tmp_path, model, no_worker
):
    save_settings(data_paths().home, ApprovalSettings(lines=1))
    job = _submit(tmp_path, model).job
    with pytest.raises(Refused, match="say why"):
        reject(job, ME, "  ", LOCAL)
    reject(job, ME, "too big for this week", LOCAL)
    status = job.read_status()
    assert status.state == "failed" and status.error == f"rejected by {ME}: too big for this week"
    with pytest.raises(Refused, match=r"was rejected by .*too big for this week"):
        resubmit(job, retry=True)  # the Jobs page's rerun of missing requests included
    assert no_worker == []


def test_a_job_awaiting_approval_is_cancelled_as_one_that_never_ran(
    studio_home, tmp_path, model, no_worker
):
    save_settings(data_paths().home, ApprovalSettings(lines=1))
    job = _submit(tmp_path, model).job
    assert "it had not started" in cancel(job)
    assert job.read_status().state == "cancelled"


def test_with_sign_in_the_admin_and_named_approvers_decide(studio_home, tmp_path, model, no_worker):
    settings = check_settings(SIGNED_IN, lines=1, approvers=["ann@example.com"])
    save_settings(data_paths().home, settings)
    first, second = _submit(tmp_path, model).job, _submit(tmp_path, model).job
    with pytest.raises(Refused, match=r"eve@example\.com may not approve: only the admins"):
        approve(first, "eve@example.com", SIGNED_IN)
    approve(first, "ann@example.com", SIGNED_IN)
    reject(second, "BOSS@example.com", "no", SIGNED_IN)
    assert [first.read_status().state, second.read_status().state] == ["queued", "failed"]


def test_bad_settings_are_refused_whole_with_every_reason(studio_home):
    home = data_paths().home
    save_settings(home, ApprovalSettings(lines=100))
    with pytest.raises(ApprovalProblem) as refused:
        check_settings(SIGNED_IN, lines=0, tokens=-5, cost=0.0, approvers=["nobody@elsewhere.org"])
    text = str(refused.value)
    for expected in (
        "the lines threshold must be above 0 (got 0)",
        "the estimated tokens threshold must be above 0 (got -5)",
        "the estimated cost threshold must be above 0 (got 0)",
        "approver 'nobody@elsewhere.org' is not a user of this studio",
    ):
        assert expected in text
    with pytest.raises(ApprovalProblem, match="approver 'alice' does not exist here"):
        check_settings(LOCAL, lines=5, approvers=["alice"])
    nobody = AccessConfig(True, ("@example.com",), ())
    with pytest.raises(ApprovalProblem, match="nobody could approve"):
        check_settings(nobody, tokens=1000)
    assert read_settings(home) == ApprovalSettings(lines=100)  # nothing half-set


def test_the_admins_are_read_from_the_secrets_access_section(tmp_path):
    home_file, project_file = tmp_path / "home.toml", tmp_path / "project.toml"
    home_file.write_text('[access]\nadmins = ["old@example.com"]\n')
    project_file.write_text('[auth]\nclient_id = "x"\n[access]\nadmins = ["boss@example.com"]\n')
    assert access_config((project_file, home_file)).admins == ("boss@example.com",)
    assert access_config((home_file,)).sign_in is False


def test_the_api_shows_an_awaiting_batch_validating_and_a_rejected_one_failed(api, keys, no_worker):
    save_settings(data_paths().home, ApprovalSettings(lines=1))
    alice = sdk(api, keys["alice"])
    file = alice.files.create(file=("a.jsonl", chats(2)), purpose="batch")
    batch = alice.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h",
        metadata={"team": "support"},
    )  # fmt: skip
    assert batch.status == "validating" and no_worker == []
    assert batch.metadata["team"] == "support"
    said = batch.metadata["approval"]
    assert said.startswith("awaiting approval: 2 lines is over the threshold of 1")
    assert "tokens" in said and "Asked by key 'alice'" in said  # the estimate: tokens counted
    assert alice.batches.retrieve(batch.id).status == "validating"
    job = next(iter(queued_jobs(data_paths().jobs)), None)
    assert job is None  # not in the queue
    assert cli("reject", batch.id, "--why", "ask finance first").returncode == 0
    rejected = alice.batches.retrieve(batch.id)
    assert rejected.status == "failed" and rejected.failed_at is not None
    assert rejected.errors.data[0].message == f"rejected by {ME}: ask finance first"
    assert "approval" not in rejected.metadata


def test_the_cli_approves_and_says_who_may_not(studio_home, tmp_path, model, no_worker):
    save_settings(data_paths().home, ApprovalSettings(lines=1))
    job = _submit(tmp_path, model).job
    refused = cli("approve", job.job_id, "--by", "mallory")
    assert refused.returncode == 2 and "mallory may not approve" in refused.stderr
    assert cli("reject", job.job_id).returncode == 2  # --why is required
    done = cli("approve", job.job_id)
    assert done.returncode == 0 and f"approved by {ME}: queued" in done.stdout
    assert job.read_status().state == "queued"
    assert [j.job_id for j in no_worker] == [job.job_id]
    again = cli("approve", job.job_id)
    assert again.returncode == 2 and "is queued, not awaiting approval" in again.stderr
    assert cli("approve", "job_nope").returncode == 2
