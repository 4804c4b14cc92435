"""The one way in (core/jobs/submit.py) and what a job may end with (core/run/worker.py).

The rules are tested once, on ``submit``; each entry point (CLI, inbox, Run page, resume)
is then shown to go through them with the case that once lost a request: a file whose
line 3 repeats line 1's ``custom_id``.
"""

from __future__ import annotations

import ast
import json

import pytest

from core.config import REPO_ROOT, data_paths
from core.jobs.folder import create_job, list_jobs
from core.jobs.inbox import process_file
from core.jobs.ledger import read_ledger, reconcile, verify
from core.jobs.submit import Refused, Submission, file_problems, resubmit, submit
from core.run import worker
from core.run.outputs import Choice, Completion, error_line, success_line
from core.schemas import EngineConfig, JobStatus
from tests.support.cli import cli
from tests.support.jobs import StandIn, request_line
from tests.support.submit import REPEATING, write


def test_repeated_ids_are_refused_even_when_invalid_lines_may_be_skipped(
    tmp_path, model, no_worker
):
    batch = write(tmp_path / "b.jsonl", REPEATING)
    submission = Submission(engine=EngineConfig(model=str(model)), skip_invalid=True)
    with pytest.raises(Refused) as refused:
        submit(batch, submission, tmp_path / "jobs")
    [problem] = refused.value.problems
    assert "line 3: custom_id 'a' repeats line 1" in problem
    assert not no_worker and list_jobs(tmp_path / "jobs") == []


def test_invalid_lines_are_refused_unless_skipped_then_the_job_is_made(tmp_path, model, no_worker):
    batch = write(tmp_path / "b.jsonl", [request_line("a", "x"), '{"custom_id": "b"}'])
    submission = Submission(engine=EngineConfig(model=str(model)))
    with pytest.raises(Refused, match=r"1 of 2 lines are invalid.*line 2: method must be"):
        submit(batch, submission, tmp_path / "jobs")
    submission.skip_invalid = True
    job = submit(batch, submission, tmp_path / "jobs").job
    assert no_worker == [job] and job.read_spec().skip_invalid


def test_an_empty_file_and_bad_settings_are_refused_with_every_reason(tmp_path, no_worker):
    batch = write(tmp_path / "b.jsonl", ["", "  "])
    submission = Submission(
        engine=EngineConfig(model=str(tmp_path / "nowhere"), tensor_parallel_size=2),
        shard_size=0,
    )
    with pytest.raises(Refused) as refused:
        submit(batch, submission, tmp_path / "jobs", gpus=0)
    text = "\n".join(refused.value.problems)
    for expected in (
        "nowhere does not exist",
        "tensor parallelism needs GPUs; this machine has none",
        "requests per shard must be at least 1",
        "the file has no request lines",
    ):
        assert expected in text
    assert not no_worker


def test_a_line_whose_mapped_folder_is_gone_is_refused_by_its_line(tmp_path, model, no_worker):
    """A mapped name matters for the lines that name it: each is refused with its line
    (skipped, it gets its error result and the name is not recorded); a name no line uses
    refuses nothing."""
    batch = write(tmp_path / "b.jsonl", [request_line("a", "x"), request_line("b", "x", model="m")])
    submission = Submission(
        engine=EngineConfig(model=str(model)),
        model_map={"m": str(tmp_path / "gone"), "unused": str(tmp_path / "gone too")},
    )
    with pytest.raises(Refused, match=r"1 of 2 lines are invalid.*line 2: body.model 'm' runs on"):
        submit(batch, submission, tmp_path / "jobs")
    submission.skip_invalid = True
    job = submit(batch, submission, tmp_path / "jobs").job
    assert no_worker == [job] and job.read_spec().model_map == {}
    assert "does not exist" in job.read_refusals()[2]["message"]


def test_a_job_keeps_only_the_mapped_names_its_lines_use(tmp_path, model, no_worker):
    """The studio's map names every model it knows; the job's models (the Jobs table's
    model column, its index) listed them all."""
    batch = write(tmp_path / "b.jsonl", [request_line("a", "x", model="m")])
    mapped = {"m": str(model), "ft:other": str(model), "gpt-4o": str(model)}
    job = submit(batch, Submission(engine=EngineConfig(model=str(model)), model_map=mapped),
                 tmp_path / "jobs").job  # fmt: skip
    assert list(job.read_spec().model_map) == ["m"]


def test_file_problems_name_each_repeat_by_its_line(tmp_path):
    from core.check import check_file

    lines = [request_line(f"r{i % 3}", "x") for i in range(6)]
    report = check_file(write(tmp_path / "b.jsonl", lines))
    [problem] = file_problems(report, skip_invalid=True)
    assert "3 line(s) repeat" in problem
    for line_no, first in ((4, 1), (5, 2), (6, 3)):
        assert f"line {line_no}: custom_id 'r{line_no - 4}' repeats line {first}" in problem


def test_cli_run_refuses_repeated_ids_with_skip_invalid(studio_home, tmp_path, model):
    batch = write(tmp_path / "b.jsonl", REPEATING)
    out = tmp_path / "out.jsonl"
    result = cli("run", str(batch), "-o", str(out), "--model", str(model), "--skip-invalid")
    assert result.returncode == 1
    assert "line 3: custom_id 'a' repeats line 1" in result.stderr
    assert not out.exists() and list_jobs(studio_home / "jobs") == []


def test_cli_validates_its_defaults_before_any_model_loads(studio_home, tmp_path, model):
    batch = write(tmp_path / "b.jsonl", [request_line("a", "x")])
    out = tmp_path / "out.jsonl"
    result = cli("run", str(batch), "-o", str(out), "--model", str(model), "--max-tokens", "-5")
    assert result.returncode == 2
    assert "job default max_tokens: input should be greater than or equal to 1" in result.stderr
    assert list_jobs(studio_home / "jobs") == []
    result = cli("run", str(batch), "-o", str(out), "--temperature", "nan")
    assert result.returncode == 2 and "job default temperature: input should be" in result.stderr
    result = cli("run", str(batch), "-o", str(out), "--ray", "local", "--replicas", "0")
    assert result.returncode == 2 and "Ray setting replicas: input should be" in result.stderr
    # Ray Data cannot run through Ray Client: refused in words, not a failed job.
    result = cli("run", str(batch), "-o", str(out), "--ray", "ray://head:10001")
    assert result.returncode == 2 and "Ray setting address: a Ray Client address" in result.stderr
    assert "ray start --address HEAD:6379 --num-cpus 0" in result.stderr
    assert list_jobs(studio_home / "jobs") == []


def test_the_inbox_moves_a_file_with_repeated_ids_aside_with_the_reason(
    studio_home, tmp_path, model, no_worker
):
    paths = data_paths()
    dropped = write(paths.inbox / "repeats.jsonl", REPEATING)
    assert process_file(dropped, paths, str(model)) is None
    report = json.loads((paths.inbox / "rejected" / "repeats.jsonl.report.json").read_text())
    assert "line 3: custom_id 'a' repeats line 1" in report["refused"][0]
    assert list_jobs(paths.jobs) == [] and not no_worker


def test_resume_of_an_old_job_that_repeats_an_id_is_refused_with_the_lines(tmp_path, no_worker):
    batch = write(tmp_path / "b.jsonl", REPEATING)
    job = create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/old"))  # pre-rules
    job.write_status(JobStatus(state="completed"))
    with pytest.raises(Refused, match="line 3: custom_id 'a' repeats line 1"):
        resubmit(job, retry=True)
    with pytest.raises(Refused, match=r"job .* is running"):
        job.write_status(JobStatus(state="running", pid=None, heartbeat_at=9e18))
        resubmit(job)
    assert not no_worker


def test_cli_resume_and_retry_of_an_old_job_that_repeats_an_id_are_refused(studio_home, tmp_path):
    batch = write(tmp_path / "b.jsonl", REPEATING)
    job = create_job(batch, data_paths().jobs, EngineConfig(model="/models/old"))  # pre-rules
    job.write_status(JobStatus(state="completed"))
    for command in ("resume", "retry"):
        result = cli(command, job.job_id)
        assert result.returncode == 1, result.stderr
        assert "line 3: custom_id 'a' repeats line 1" in result.stderr
    assert job.read_status().state == "completed"  # no worker was started


def test_only_the_submission_module_creates_jobs_or_starts_workers():
    """The structural guard: the rules cannot drift into a second entry point again."""
    callers = []
    for path in [*REPO_ROOT.glob("core/**/*.py"), *REPO_ROOT.glob("pages/*.py")]:
        if path.name in ("submit.py", "folder.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name | ast.Attribute):
                name = node.id if isinstance(node, ast.Name) else node.attr
                if name in ("create_job", "start_worker"):
                    callers.append(f"{path.relative_to(REPO_ROOT)}: {name}")
    assert callers == []


def ok(custom_id: str) -> dict:
    return success_line(custom_id, "m", Completion(2, [Choice("ok", "stop", 1)]))


class Executor(StandIn):
    """A stand-in executor that answers each request with ``answer(custom_id)`` (a line,
    or None to drop the request silently, as the lost-request bug did)."""

    def __init__(self, answer):
        self.answer = answer

    def run(self, requests):
        for request in requests:
            line = self.answer(request.custom_id)
            if line is not None:
                yield [line]


def run_with(monkeypatch, tmp_path, lines, answer):
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Executor(answer))
    tmp_path.mkdir(exist_ok=True)
    batch = write(tmp_path / "b.jsonl", lines)
    job = create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/none"))
    return job, worker.run_job(job)


def test_a_job_whose_input_repeats_an_id_cannot_end_completed(tmp_path, monkeypatch):
    job, status = run_with(monkeypatch, tmp_path, REPEATING, ok)
    assert status.state == "failed"
    assert "input line(s) repeat the custom_id of an earlier line" in status.error
    assert "line 3 ('a')" in status.error
    assert json.loads(job.status_file.read_text())["state"] == "failed"
    report = reconcile(job)
    assert report.repeated_lines == [3] and not report.complete
    assert not verify(job).ok


def test_a_request_the_executor_drops_fails_the_job_naming_it(tmp_path, monkeypatch):
    lines = [request_line(f"r{i}", "x") for i in range(4)]
    job, status = run_with(monkeypatch, tmp_path, lines, lambda c: None if c == "r2" else ok(c))
    assert status.state == "failed"
    assert "1 requests have no result, e.g. r2" in status.error
    assert "Resume runs those without one" in status.message
    assert read_ledger(job).missing == ["r2"]


def test_a_job_whose_requests_all_failed_ends_failed(tmp_path, monkeypatch):
    lines = [request_line(f"r{i}", "x") for i in range(3)]
    rejected = lambda c: error_line(c, "engine_rejected", "prompt too long")  # noqa: E731
    job, status = run_with(monkeypatch, tmp_path, lines, rejected)
    assert (status.state, status.failed, status.succeeded) == ("failed", 3, 0)
    assert "all 3 requests failed (3 engine_rejected)" in status.message
    assert json.loads(job.status_file.read_text())["outcome"] == "failed"
    assert status.display_state == "failed"


def test_a_job_with_some_failures_is_marked_completed_with_errors(tmp_path, monkeypatch):
    lines = [request_line(f"r{i}", "x") for i in range(3)]
    answer = lambda c: error_line(c, "engine_rejected", "no") if c == "r1" else ok(c)  # noqa: E731
    job, status = run_with(monkeypatch, tmp_path, lines, answer)
    assert (status.state, status.succeeded, status.failed) == ("completed", 2, 1)
    assert status.display_state == "completed with errors"
    assert json.loads(job.status_file.read_text())["outcome"] == "completed_with_errors"
    _, clean = run_with(monkeypatch, tmp_path / "clean", lines, ok)
    assert (clean.state, clean.display_state, clean.outcome) == ("completed",) * 3


def test_lines_the_model_cannot_run_are_refused_at_submission_and_never_run(
    tmp_path, default_model, no_worker, monkeypatch
):
    """A token id past the vocabulary and a prompt beyond the context pass a structural
    check; the submission's check against the model refuses them, and with skip_invalid
    each gets its own error result while the engine sees only the rest."""
    vocab = json.loads((default_model / "config.json").read_text())["vocab_size"]
    batch = tmp_path / "b.jsonl"
    lines = [
        request_line("ok", "Hi"),
        request_line("bias", "Hi", logit_bias={str(vocab): 5}),
        request_line("long", "word " * 9000),
    ]
    batch.write_text("\n".join(lines) + "\n")
    submission = Submission(engine=EngineConfig(model=str(default_model)))
    with pytest.raises(Refused) as refused:
        submit(batch, submission, tmp_path / "jobs")
    assert "2 of 3 lines are invalid" in refused.value.problems[0]

    submission.skip_invalid = True
    job = submit(batch, submission, tmp_path / "jobs").job
    ran: list[str] = []

    class Recorder(StandIn):
        def run(self, requests):
            ran.extend(r.custom_id for r in requests)
            yield [success_line(r.custom_id, "m", Completion(2, [Choice("ok", "stop", 1)]))
                   for r in requests]  # fmt: skip

    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Recorder())
    worker.run_job(job)
    assert ran == ["ok"]
    errors = {json.loads(raw)["custom_id"]: json.loads(raw)["error"]
              for raw in job.errors.read_text().splitlines()}  # fmt: skip
    assert errors["bias"]["code"] == "invalid_request" and errors["bias"]["line"] == 2
    assert errors["bias"]["param"] == "body.logit_bias"
    assert f"token id {vocab}" in errors["bias"]["message"]
    assert errors["long"]["param"] == "body.messages" and "context" in errors["long"]["message"]
    status = job.read_status()
    assert (status.succeeded, status.failed, status.state) == (1, 2, "completed")
