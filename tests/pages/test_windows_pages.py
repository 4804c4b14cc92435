"""The pages tests of run windows (issue 42 items 3 and 4; the rules: tests/unit/test_windows.py):
Settings keeps the time zone and default windows and refuses bad ones whole; Run says when
a job would run and a completion window its windows cannot meet, before Start, and Start
keeps the windows in the job; Monitor and Jobs say when a job its window's close paused
resumes."""

from __future__ import annotations

from datetime import UTC, datetime

from core.config import data_paths
from core.jobs.folder import list_jobs
from core.jobs.windows import DAY_NAMES, WindowSettings, check_settings, read_settings
from core.jobs.windows import save_settings as save_windows
from core.schemas import JobStatus, now_iso
from tests.support.jobs import monitored_job, request_line, rewrite_spec
from tests.support.pages import open_page, shown, texts
from tests.support.submit import write
from ui.handover import CheckedBatch


def _save(at) -> list[str]:
    next(b for b in at.button if b.label == "Save run windows").click().run()
    assert not at.exception, [e.message for e in at.exception]
    return [shown(e.value) for e in at.error]


def test_settings_keeps_the_zone_and_defaults_and_refuses_bad_ones_whole(studio_home):
    at = open_page("settings.py")
    at.text_input(key="windows_zone").input("Mars/Olympus").run()
    at.text_input(key="windows_default").input("weekdays 20:00-07:00, weekends all day").run()
    at.text_area(key="windows_owners").input("alice = mon 09:00-09:00\nbob weekends").run()
    errors = _save(at)
    assert any("unknown time zone 'Mars/Olympus'" in e for e in errors), errors
    assert read_settings(data_paths().home) == WindowSettings()  # nothing half-set
    at.text_input(key="windows_zone").input("Europe/Paris").run()
    errors = _save(at)
    assert any("line 2: write NAME = WINDOWS (got 'bob weekends')" in e for e in errors), errors
    at.text_area(key="windows_owners").input("alice = mon 09:00-09:00").run()
    errors = _save(at)
    assert any("alice's windows: window 1" in e and "never opens" in e for e in errors), errors
    at.text_area(key="windows_owners").input("alice = weekends").run()
    assert _save(at) == []
    kept = read_settings(data_paths().home)
    assert kept.time_zone == "Europe/Paris"
    assert kept.default == "weekdays 20:00-07:00, weekends all day"
    assert kept.owners == {"alice": "weekends all day"}


def test_run_says_when_the_job_runs_and_that_it_cannot_meet_its_window(
    studio_home, tmp_path, model, no_worker
):
    save_windows(data_paths().home, check_settings("UTC"))
    closed = DAY_NAMES[(datetime.now(UTC).weekday() + 3) % 7] + " all day"
    batch = write(tmp_path / "b.jsonl", [request_line("r0", "hi"), request_line("r1", "ho")])
    at = open_page("run.py", checked_batch=CheckedBatch(batch, batch.name))
    at.selectbox(key="model_choice").set_value("Another folder…").run()
    at.text_input(key="model_path").input(str(model)).run()
    at.text_input(key="run_windows").input("funday").run()
    assert any("run windows: window 1 'funday'" in shown(e.value) for e in at.error)
    at.text_input(key="run_windows").input(closed).run()
    said = texts(at)
    assert f"Outside its run windows ({closed} (UTC)): runs next at" in said
    assert "No run window opens within its completion window of 24 h" in said
    next(b for b in at.button if b.label == "Start run").click().run()
    (job,) = list_jobs(data_paths().jobs)
    assert job.read_spec().run_windows == closed
    assert [j.job_id for j in no_worker] == [job.job_id]


def test_monitor_and_jobs_say_a_paused_job_resumes_when_its_window_opens(studio_home):
    """A job its window's close paused: queued again, with what it has and when it goes on
    (before this change a window's close left a running job running: no such words)."""
    job = monitored_job(studio_home)
    closed = DAY_NAMES[(datetime.now(UTC).weekday() + 3) % 7] + " all day"
    rewrite_spec(job, run_windows=closed, run_windows_zone="UTC")
    status = JobStatus(state="queued", total=1, done=0, runs=1, paused_at=now_iso())
    job.write_status(status)
    says = (
        f"Paused at the close of its run windows ({closed} (UTC)) with 0 of 1 requests done: "
        "resumes by itself at "
    )
    monitor = open_page("monitor.py", job_id=job.job_id)
    assert not monitor.exception, [e.message for e in monitor.exception]
    assert says in texts(monitor)
    jobs = open_page("jobs.py")
    assert not jobs.exception, [e.message for e in jobs.exception]
    assert says in texts(jobs)
