"""Run (settings), Monitor, Jobs and Settings pages, driven by ``AppTest`` (no worker)."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime

import pytest

from core.config import SAMPLE_DATA
from core.jobs.folder import JobFolder
from core.jobs.queue import EngineLock
from core.schemas import JobStatus
from tests.support.jobs import finished_job, request_line
from tests.support.pages import metric, open_page, shown, texts
from ui.handover import CheckedBatch

pytestmark = pytest.mark.usefixtures("studio_home")


def test_run_refuses_tensor_parallelism_beyond_the_gpus():
    at = open_page(
        "run.py",
        checked_batch=CheckedBatch(
            SAMPLE_DATA / "review_sentiment.jsonl", "review_sentiment.jsonl"
        ),
    )
    at.number_input(key="tp").set_value(4).run()
    at.button[0].click().run()
    assert "tensor parallelism needs GPUs; this machine has none" in texts(at)
    assert "job_id" not in at.session_state


def test_monitor_without_jobs_says_what_to_do_first():
    at = open_page("monitor.py")
    assert "No jobs yet" in texts(at)


FAULT = ("engine_error", "the engine stopped")  # a failure a retry may change


def test_monitor_shows_a_finished_job_with_its_rates_and_charts(studio_home):
    rows = [
        {"custom_id": "a", "answer": "yes"},
        {"custom_id": "b", "answer": None, "error": FAULT},
        {"custom_id": "c", "answer": "<script>x</script>"},
    ]
    job = finished_job(studio_home, rows)
    now = time.time()
    samples = [
        {"t": now - 4, "done": 0, "completion_tokens": 0, "rss_mib": 900, "cpu_percent": 150},
        {"t": now - 2, "done": 2, "completion_tokens": 10, "rss_mib": 950, "cpu_percent": 190},
        {"t": now, "done": 3, "completion_tokens": 16, "rss_mib": 950, "cpu_percent": 180},
    ]
    job.metrics.write_text("".join(json.dumps(s) + "\n" for s in samples))
    status = job.read_status()
    status.started_at = datetime.fromtimestamp(now - 5, UTC).isoformat()  # the run's start
    status.finished_at = datetime.fromtimestamp(now, UTC).isoformat()  # ...and its end
    status.run_completion_tokens = 16  # as the samples say
    job.write_status(status)
    at = open_page("monitor.py", job_id=job.job_id)
    assert metric(at, "Succeeded") == "2" and metric(at, "Failed") == "1"
    # A finished job's speed is its average over the run (never "0.00" once it stopped):
    # its results and their tokens over the time from the sample before the first that
    # moved to its end.
    assert metric(at, "Requests/s (average)") == "0.75"
    assert metric(at, "Output tokens/s (average)") == "4"
    assert metric(at, "ETA") == "done"
    assert "Job " + job.job_id + " completed with errors: 2 succeeded, 1 failed" in texts(at)
    assert "showing the worker process's memory and CPU" in texts(at)
    latest = at.dataframe[0].value
    assert "<script>x</script>" in list(latest["answer"])  # shown as text, not HTML
    assert any(b.label.startswith("Retry 1 failed") for b in at.button)


def test_a_job_whose_requests_all_failed_shows_as_failed_never_as_a_success(studio_home):
    job = finished_job(studio_home, {"a": None, "b": None})
    at = open_page("monitor.py", job_id=job.job_id)
    assert not at.success
    assert shown([e.value for e in at.error][-1]).startswith(
        f"Job {job.job_id} failed: 0 succeeded"
    )
    assert "failed: 2 / 2 requests" in at.get("progress")[0].proto.text
    at.switch_page("pages/jobs.py").run()
    assert not at.exception
    assert f"{job.job_id}: failed" in [shown(s.value) for s in at.subheader]
    table = at.dataframe[0].value.set_index("job_id")
    assert table.loc[job.job_id, "state"] == "failed"


def test_monitor_flags_an_interrupted_job_and_offers_resume(studio_home):
    job = finished_job(studio_home, {"a": "yes", "b": "no", "c": "maybe"})
    status = job.read_status()
    status.state, status.pid, status.heartbeat_at = "running", 2**22 + 7, time.time()
    status.done = status.succeeded = 1  # as if it died after its first result
    status.message = "running 3 requests on tiny"  # the dead worker's last words
    job.write_status(status)
    assert not os.path.exists(f"/proc/{status.pid}")
    at = open_page("monitor.py", job_id=job.job_id)
    assert "The worker stopped without finishing" in texts(at)
    assert "only the 2 requests that have no result yet" in texts(at)
    assert "running 3 requests on tiny" not in texts(at)
    assert metric(at, "ETA") == "–"  # nothing runs: no time to wait for, and not "done"
    assert [b.label for b in at.button] == ["Resume (2 to run)"]
    assert "The studio resumes the job by itself within seconds (once)" in texts(at)
    status.interruptions = 1  # it was resumed by itself once already (core.jobs.recovery)
    job.write_status(status)
    at = open_page("monitor.py", job_id=job.job_id)
    assert "resumed by itself once already, so it is not again" in texts(at)
    assert "only the 2 requests that have no result yet" in texts(at)


def test_jobs_page_reconciles_and_verifies(studio_home):
    job = finished_job(
        studio_home,
        [{"custom_id": "a", "answer": "yes"}, {"custom_id": "b", "answer": None, "error": FAULT}],
    )
    at = open_page("jobs.py")
    assert metric(at, "Requests") == "2" and metric(at, "Success rate") == "50.0%"
    verify = next(b for b in at.button if b.label.startswith("Verify"))
    verify.click().run()
    assert "2 result lines consistent" in texts(at)
    assert "not keyed: they catch corruption and naive edits" in texts(at)  # no more claimed
    heads = [line for c in at.code for line in c.value.splitlines()]
    last = json.loads(job.output.read_text().splitlines()[-1])["chain_sha256"]
    assert f"output.jsonl  {last}" in heads  # the head a user may keep elsewhere
    rerun = next(b for b in at.button if b.label.startswith("Rerun the 1 failed"))
    assert rerun is not None
    assert not [b for b in at.button if b.label.startswith("Retry")]  # one way to rerun them
    JobFolder(job.path).write_status(
        JobStatus(state="running", pid=os.getpid(), heartbeat_at=time.time())
    )
    at = open_page("jobs.py")
    assert [b.label for b in at.button if b.label == "Cancel"] == ["Cancel"]


def test_jobs_rerun_says_what_it_started_at_once_and_is_not_offered_again(studio_home):
    """Issue 58, item 14: the click queues the rerun, and the page drawn at once says so,
    shows the job queued, and offers no second rerun (it offered it again for minutes)."""
    job = finished_job(
        studio_home,
        [{"custom_id": "a", "answer": "yes"}, {"custom_id": "b", "answer": None, "error": FAULT}],
    )
    engine = EngineLock(studio_home / "jobs")  # this test is the worker holding the engine:
    assert engine.acquire()  # the job is queued for it, and no worker process starts
    try:
        at = open_page("jobs.py")
        rerun = next(b for b in at.button if b.label.startswith("Rerun the 1 failed"))
        rerun.click().run()
        assert not at.exception, [e.message for e in at.exception]
        said = [shown(s.value) for s in at.success]
        assert said == [
            "Rerun of the 1 failed, expired or missing requests (kept as rerun.jsonl) queued "
            f"as job {job.job_id}: the worker holding the engine takes it up (after the job "
            "it runs now, if any). Monitor follows it."
        ], said
        assert JobFolder(job.path).read_status().state == "queued"
        assert f"{job.job_id}: queued" in [shown(h.value) for h in at.subheader]
        assert not [b for b in at.button if b.label.startswith("Rerun")]
        assert [b.label for b in at.button if b.label == "Cancel"] == ["Cancel"]
    finally:
        engine.release()


def test_settings_lists_folders_and_the_built_in_model(studio_home):
    at = open_page("settings.py")
    folders = at.dataframe[0].value
    assert str(studio_home) in list(folders["path"])
    models = at.dataframe[1].value
    assert "SmolLM2-135M-Instruct" in list(models["model"])


def test_settings_shows_the_model_names_kept_for_the_studio(studio_home, default_model):
    from core.model_names import write_names

    write_names({"gpt-4o-mini": str(default_model)})
    at = open_page("settings.py")
    assert not at.exception
    names = next(d.value for d in at.dataframe if list(d.value.columns) == ["name", "model"])
    assert names.to_dict("records") == [{"name": "gpt-4o-mini", "model": default_model.name}]
    assert "Save model names" in [b.label for b in at.button]


def test_settings_lists_the_api_keys_by_name_never_the_key(studio_home):
    from core.api.keys import create_key

    key = create_key(studio_home, "pipeline")
    at = open_page("settings.py")
    keys = next(d.value for d in at.dataframe if "name (owner)" in d.value.columns)
    assert list(keys["name (owner)"]) == ["pipeline"]
    assert key not in keys.to_string() and key[:7] in keys.to_string()


def test_settings_and_the_cli_require_a_key_on_this_machine_too(studio_home):
    """The API reads the setting on every call (tests/unit/test_api_server.py): Settings'
    checkbox and ``core keys loopback`` write the one setting both show."""
    from core.api.keys import KeyRefused, caller_for, read_access
    from tests.support.cli import cli

    at = open_page("settings.py")
    assert at.checkbox(key="keys_here").value is False
    assert caller_for(studio_home, "", loopback=True) is None
    at.checkbox(key="keys_here").check().run()
    assert read_access(studio_home).keys_on_loopback
    assert "needs a key from this machine too" in " ".join(t.value for t in at.toast)
    with pytest.raises(KeyRefused):
        caller_for(studio_home, "", loopback=True)
    assert "needs a key too" in cli("keys", "loopback").stdout
    assert cli("keys", "loopback", "open").returncode == 0
    assert open_page("settings.py").checkbox(key="keys_here").value is False
    assert caller_for(studio_home, "", loopback=True) is None


def test_jobs_page_shows_the_queue_and_reorders_it(studio_home):
    first = finished_job(studio_home, {"a": "yes"})
    second = finished_job(studio_home, {"b": "yes"})
    for job in (first, second):
        job.write_status(JobStatus(state="queued"))
    at = open_page("jobs.py")
    order = [shown(m.value) for m in at.markdown if m.value.startswith(("1.", "2."))]
    assert order[0].startswith(f"1. {first.job_id}")
    at.number_input(key=f"prio-{second.job_id}").set_value(3).run()
    order = [shown(m.value) for m in at.markdown if m.value.startswith(("1.", "2."))]
    assert order[0].startswith(f"1. {second.job_id}")


def test_jobs_page_lists_the_first_queued_jobs_and_counts_the_rest(studio_home, tmp_path):
    """One owner's thousand queued jobs must not make a widget each on everyone's Jobs page
    (issue 41 item 5): the first QUEUE_SHOWN with their priority, the rest counted, and one
    box for a later job chosen, whose priority moves it up."""
    from core.jobs.folder import create_job, queue_job
    from core.jobs.queue import priority, queued_jobs
    from core.schemas import EngineConfig

    batch = tmp_path / "one.jsonl"
    batch.write_text(request_line("a", "hi") + "\n")
    jobs = [
        create_job(batch, studio_home / "jobs", EngineConfig(model="/m"), owner_key="a")
        for _ in range(23)
    ]
    for job in jobs:
        queue_job(job)
    at = open_page("jobs.py")
    priorities = [n for n in at.number_input if str(n.key).startswith("prio-")]
    assert len(priorities) == 21  # the first 20, and the later job chosen
    assert "3 more queued jobs after these" in texts(at)
    # a later job's priority is set from the one box of the later jobs: it moves up
    later = at.selectbox(key="queue-later")
    assert [place for place, *_ in (o.split(". ") for o in later.options)] == ["21", "22", "23"]
    at = later.select_index(2).run()
    (box,) = [n for n in at.number_input if str(n.key) == f"prio-{jobs[-1].job_id}"]
    box.set_value(5).run()
    assert priority(jobs[-1]) == 5
    assert queued_jobs(studio_home / "jobs")[0].job_id == jobs[-1].job_id  # first now


def test_run_shows_the_estimate_made_on_upload_and_check():
    estimate = {"input_tokens": 1234, "expected_output_tokens": 500, "max_output_tokens": 800,
                "seconds": 90.0, "cost": 12.5, "currency": "USD", "over_budget": True,
                "budget": 10.0}  # fmt: skip
    at = open_page(
        "run.py",
        checked_batch=CheckedBatch(
            SAMPLE_DATA / "review_sentiment.jsonl", "review_sentiment.jsonl", estimate=estimate
        ),
    )
    assert metric(at, "Input tokens") == "1,234"
    assert metric(at, "Cost") == "12.50 USD"
    assert "over the budget of 10.00 USD" in texts(at)


def test_run_names_only_the_models_upload_sent_to_another_folder():
    checked_with = "/models/checked-model"
    batch = CheckedBatch(
        SAMPLE_DATA / "review_sentiment.jsonl",
        "review_sentiment.jsonl",
        model=checked_with,
        model_map={"a": checked_with, "b": "/models/other-model", "c": ""},
    )
    assert batch.mapped_elsewhere() == {"b": "/models/other-model"}
    at = open_page("run.py", checked_batch=batch)
    assert "Model mapping from Upload & check: `b` → other-model;" in texts(at)
    assert "`a`" not in texts(at)


def test_the_monitors_verdict_names_the_job_by_its_name(studio_home):
    job = finished_job(studio_home, {"a": "yes"})
    job.rename("March refunds")
    at = open_page("monitor.py", job_id=job.job_id)
    verdict = shown(at.success[0].value)
    assert verdict.startswith(f"Job March refunds · {job.job_id[-6:]} completed")


def test_retry_is_offered_only_for_failures_a_retry_can_change(studio_home):
    """Issue 30, item 5: a request the engine refused (over the context) fails the same
    way again; offering to retry it misleads."""
    rows = [
        {"custom_id": "a", "answer": "yes"},
        {"custom_id": "b", "answer": None, "error": ("engine_rejected", "prompt too long")},
        {"custom_id": "c", "answer": None, "error": FAULT},
    ]
    job = finished_job(studio_home, rows, name="mixed.jsonl")
    at = open_page("monitor.py", job_id=job.job_id)
    assert [b.label for b in at.button if b.label.startswith("Retry")] == ["Retry 1 failed"]
    refused = finished_job(studio_home, {"a": "yes", "b": None}, name="refused.jsonl")
    at = open_page("monitor.py", job_id=refused.job_id)
    assert metric(at, "Failed") == "1"
    assert not [b for b in at.button if b.label.startswith("Retry")]


def test_run_offers_the_valid_lines_only_when_start_would_run_them(studio_home):
    """Issue 30, item 5: a repeated id is refused even when invalid lines are skipped, so
    "Run the valid lines" is not offered; Start is off and the reason is said."""
    batch = studio_home.parent / "repeats.jsonl"
    lines = [request_line("a", "x"), request_line("a", "y"), "not json"]
    batch.write_text("\n".join(lines) + "\n")
    at = open_page("run.py", checked_batch=CheckedBatch(batch, batch.name))
    assert not [c for c in at.checkbox if c.label.startswith("Run the")]
    assert "repeat a custom_id of an earlier line" in texts(at)
    assert next(b for b in at.button if b.label == "Start run").disabled
    batch.write_text(request_line("a", "x") + "\nnot json\n")
    at = open_page("run.py", checked_batch=CheckedBatch(batch, batch.name))
    assert [c.label for c in at.checkbox if c.label.startswith("Run the")] == [
        "Run the 1 valid lines; the 1 invalid ones get an error result"
    ]


def test_jobs_page_shows_a_batch_api_jobs_metadata_and_owner(studio_home):
    job = finished_job(studio_home, {"a": "yes"})
    spec = json.loads(job.spec_file.read_text())
    spec["metadata"] = {"team": "support"}
    spec["batch"] = {"input_file_id": "file-1", "endpoint": "/v1/chat/completions"}
    spec["provenance"]["owner"] = "pipeline"
    job.spec_file.write_text(json.dumps(spec))
    at = open_page("jobs.py")
    provenance = json.loads(at.json[0].value)
    assert provenance["metadata"] == {"team": "support"} and provenance["owner"] == "pipeline"
    assert provenance["batch"]["input_file_id"] == "file-1"


def test_settings_keeps_an_adapter_name_when_the_names_are_saved(
    studio_home, default_model, tmp_path
):
    """An adapter named with ``core models add-adapter`` is one of Settings' choices, and
    saving the names table keeps it and its base (issue 59 item 1)."""
    from core.model_names import add_adapter, read_kept
    from tests.support.lora import make_adapter

    folder = make_adapter(tmp_path / "support-v2", "elsewhere/base")  # base given below
    add_adapter("ft:gpt-4o-mini:acme::support", folder, default_model)
    at = open_page("settings.py")
    names = next(d.value for d in at.dataframe if list(d.value.columns) == ["name", "model"])
    assert names.to_dict("records") == [
        {"name": "ft:gpt-4o-mini:acme::support", "model": "support-v2"}
    ]
    at.button(key="save_model_names").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    kept = read_kept()
    assert kept.names == {"ft:gpt-4o-mini:acme::support": str(folder)}
    assert kept.bases == {str(folder): str(default_model)}
