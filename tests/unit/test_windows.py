"""Run windows (issue 42 items 3 and 4): the text form, when a window opens and closes
(daylight saving included), the hours open between two times, and bad input refused whole."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from core.api.batch_view import openai_status
from core.config import data_paths
from core.jobs.folder import cancel, list_jobs, queue_job
from core.jobs.ledger import read_ledger
from core.jobs.submit import Submission, submit
from core.jobs.windows import (
    DAY_NAMES,
    Clock,
    WindowProblem,
    check_settings,
    held_note,
    open_eta,
    parse,
    read_settings,
    save_settings,
    set_owner_default,
    windows_for,
)
from core.run import worker
from core.run.monitoring import rates
from core.run.outputs import error_line
from core.run.pool import MULTIPROCESSING_ENV
from core.run.progress import eta
from core.schemas import EngineConfig, JobStatus
from tests.support.api import chats, sdk
from tests.support.cli import cli
from tests.support.jobs import Answers, make_job, request_line, rewrite_spec
from tests.support.submit import write

NIGHTS = "weekdays 20:00-07:00, weekends all day"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_the_issues_example_reads_and_opens_on_weeknights_and_weekends():
    windows = parse(NIGHTS, "Europe/Paris")
    assert windows.text == NIGHTS
    monday_noon = at("2026-12-07T12:00+01:00")
    assert not windows.is_open(monday_noon)
    assert windows.next_open(monday_noon) == at("2026-12-07T20:00+01:00")
    assert windows.next_close(at("2026-12-07T21:00+01:00")) == at("2026-12-08T07:00+01:00")
    # Friday night runs on into the weekend and to Monday 07:00
    assert windows.is_open(at("2026-12-12T03:00+01:00"))
    assert windows.next_close(at("2026-12-11T21:00+01:00")) == at("2026-12-14T07:00+01:00")
    assert windows.next_open(at("2026-12-08T06:59+01:00")) == at("2026-12-08T06:59+01:00")


def test_hours_open_between_two_times_and_when_work_ends():
    windows = parse(NIGHTS, "UTC")
    monday = at("2026-12-07T12:00+00:00")
    # four weeknights of 11 h, then Friday 20:00 to Monday 07:00 (59 h)
    assert windows.open_seconds(monday, monday + timedelta(days=7)) == 103 * 3600
    # 12 h of work: 11 h on Monday night, the last hour on Tuesday night
    assert windows.finish_after(monday, 12 * 3600) == at("2026-12-08T21:00+00:00")


def test_wall_clock_hours_hold_across_daylight_saving():
    windows = parse("daily 02:30-04:00", "Europe/Paris")
    # 29 March 2026: clocks jump from 02:00 to 03:00; the window opens at the jump
    assert windows.next_open(at("2026-03-29T00:00+01:00")) == at("2026-03-29T03:00+02:00")
    assert windows.open_seconds(at("2026-03-29T00:00+01:00"), at("2026-03-29T12:00+02:00")) == 3600
    # summer: 20:00 is 18:00 UTC, winter 19:00 UTC
    evening = parse("daily 20:00-22:00", "Europe/Paris")
    assert evening.next_open(at("2026-07-01T12:00+00:00")) == at("2026-07-01T18:00+00:00")
    assert evening.next_open(at("2026-12-01T12:00+00:00")) == at("2026-12-01T19:00+00:00")
    # 25 October 2026: clocks go back, 02:00-03:00 happens twice; the window is 3 h long
    back = parse("sun 01:00-04:00", "Europe/Paris")
    day = at("2026-10-25T00:00+02:00")
    assert back.open_seconds(day, day + timedelta(hours=12)) == 4 * 3600


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("mon 09:00-09:00", "never opens"),
        ("mon 00:00-00:00", "never opens"),
        ("funday 10:00-11:00", "'funday' is not a day"),
        ("mon 10-11", "are not HH:MM-HH:MM"),
        ("daily 25:00-26:00", "is not a time of day"),
        ("mon 08:00-12:00, mon 11:00-13:00", "overlap on Monday 11:00-12:00"),
        ("weekdays 20:00-07:00, tue 06:00-08:00", "overlap on Tuesday 06:00-07:00"),
        ("mon 10:00-11:00,, tue", "window 2 is empty"),
    ],
)
def test_bad_windows_are_refused_with_what_is_wrong(text, says):
    with pytest.raises(WindowProblem, match=says):
        parse(text, "UTC")


def test_every_reason_at_once_and_an_unknown_zone():
    with pytest.raises(WindowProblem) as caught:
        parse("funday, mon 09:00-09:00", "Mars/Olympus")
    message = str(caught.value)
    assert "unknown time zone 'Mars/Olympus'" in message
    assert "'funday' is not a day" in message and "never opens" in message


def test_touching_windows_and_empty_text():
    assert parse("mon 08:00-12:00; mon 12:00-13:00", "UTC") is not None
    assert parse("", "UTC") is None
    always = parse("daily", "UTC")
    now = at("2026-12-07T12:00+00:00")
    assert always.is_open(now) and always.next_close(now) is None
    assert always.finish_after(now, 60) == now + timedelta(seconds=60)


def test_settings_refused_whole_and_the_job_s_own_windows_win(tmp_path):
    save_settings(tmp_path, check_settings("UTC", "weekends", {"alice": "daily 20:00-06:00"}))
    with pytest.raises(WindowProblem, match="default windows"):
        check_settings("UTC", "mon 9-9")
    with pytest.raises(WindowProblem, match="bob's windows"):
        set_owner_default(tmp_path, "bob", "mon 09:00-09:00")
    assert "bob" not in read_settings(tmp_path).owners  # nothing half-set
    assert windows_for(tmp_path, None, "alice").text == "daily 20:00-06:00"
    assert windows_for(tmp_path, "", "carol").text == "weekends all day"
    assert windows_for(tmp_path, "mon 01:00-02:00", "alice").text == "mon 01:00-02:00"
    assert windows_for(tmp_path, "any", "alice") is None


class MovingClock(Clock):
    """Time that moves on by ``step`` at each of the worker's waits, without waiting; it
    keeps what the job's status said at the first wait."""

    def __init__(self, start: datetime, job, step: timedelta = timedelta(minutes=15)):
        self.moment, self.job, self.step = start, job, step
        self.said_while_waiting: list[str] = []

    def now(self) -> datetime:
        return self.moment

    def sleep(self, seconds: float) -> None:
        if not self.said_while_waiting:
            status = self.job.read_status()
            self.said_while_waiting.append(f"{status.state}: {status.message}")
        self.moment += self.step


class Clocked(Answers):
    """Answers every request, noting the (moved) time each ran at."""

    def __init__(self, clock: MovingClock) -> None:
        super().__init__()
        self.clock, self.at = clock, []

    def run(self, requests):
        self.at.append(self.clock.now())
        yield from super().run(requests)


def test_a_queued_job_outside_its_window_waits_and_starts_by_itself_when_it_opens(
    tmp_path, monkeypatch
):
    job = make_job(tmp_path, 3)
    # no completion window: a job past one is taken to expire, and these dates are fixed
    rewrite_spec(
        job, run_windows="daily 20:00-22:00", run_windows_zone="UTC", completion_window_hours=None
    )
    queue_job(job)
    clock = MovingClock(at("2026-12-07T12:00+00:00"), job)
    executor = Clocked(clock)
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: executor)
    monkeypatch.setattr(worker, "idle_seconds", lambda home: 0.0, raising=False)

    status = worker.serve(job, clock=clock)  # the worker started for it, as submit does

    assert clock.said_while_waiting == [
        "queued: outside its run windows (daily 20:00-22:00 (UTC)): runs next at "
        "Mon 7 Dec 20:00 UTC"
    ]
    assert executor.at == [at("2026-12-07T20:00+00:00")]  # not before, and not a day late
    assert status.state == "completed" and status.succeeded == 3
    assert sorted(executor.ran) == ["r0", "r1", "r2"]


def test_a_job_inside_its_window_and_one_without_windows_start_at_once(tmp_path, monkeypatch):
    job = make_job(tmp_path, 2)
    rewrite_spec(job, run_windows=NIGHTS, run_windows_zone="UTC", completion_window_hours=None)
    queue_job(job)
    clock = MovingClock(at("2026-12-12T12:00+00:00"), job)  # a Saturday
    executor = Clocked(clock)
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: executor)
    monkeypatch.setattr(worker, "idle_seconds", lambda home: 0.0, raising=False)
    assert worker.serve(job, clock=clock).state == "completed"
    assert executor.at == [at("2026-12-12T12:00+00:00")]


def _closed_day() -> str:
    """A day, all day, that is not today nor tomorrow (UTC): closed now and for 24 h."""
    return DAY_NAMES[(datetime.now(UTC).weekday() + 3) % 7] + " all day"


def test_submit_keeps_the_windows_says_when_it_runs_and_that_it_cannot_meet_its_window(
    studio_home, tmp_path, model, no_worker
):
    save_settings(data_paths().home, check_settings("UTC"))
    batch = write(tmp_path / "b.jsonl", [request_line(f"r{i}", "hi") for i in range(2)])
    engine = EngineConfig(model=str(model))
    started = submit(batch, Submission(engine=engine, run_windows=_closed_day()))
    spec = started.job.read_spec()
    assert (spec.run_windows, spec.run_windows_zone) == (_closed_day(), "UTC")
    held, warning = started.notes
    assert held.startswith(f"outside its run windows ({_closed_day()} (UTC)): runs next at ")
    assert warning.startswith("warning: no run window opens within its completion window of 24 h")
    assert no_worker == [started.job]  # queued with its worker, which waits for the window
    # no completion window: nothing to warn of
    quiet = submit(
        batch, Submission(engine=engine, run_windows=_closed_day(), completion_window_hours=None)
    )
    assert len(quiet.notes) == 1


def test_bad_windows_refuse_the_job_whole_in_core_run(studio_home, tmp_path, model, no_worker):
    batch = write(tmp_path / "b.jsonl", [request_line("r0", "hi")])
    args = ["run", str(batch), "-o", str(tmp_path / "out.jsonl"), "--model", str(model)]
    refused = cli(*args, "--windows", "weekdays 20:00-07:00, mon 06:00-08:00")
    assert refused.returncode == 2
    assert "run windows: windows 'weekdays 20:00-07:00' and 'mon 06:00-08:00' overlap on " in (
        refused.stderr
    )
    assert list_jobs(data_paths().jobs) == [] and no_worker == []


def test_the_api_takes_a_key_s_default_or_the_batch_s_own_windows_and_stays_validating(
    api, keys, no_worker
):
    home = data_paths().home
    save_settings(home, check_settings("UTC"))
    set_owner_default(home, "alice", _closed_day())
    alice = sdk(api, keys["alice"])
    file = alice.files.create(file=("a.jsonl", chats(2)), purpose="batch")
    batch = alice.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.status == "validating"
    assert batch.metadata["next_run"].startswith(f"outside its run windows ({_closed_day()}")
    own = alice.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h",
        metadata={"run_window": "any"},
    )  # fmt: skip
    assert own.status == "validating" and "next_run" not in own.metadata
    bad = alice.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h",
        metadata={"run_window": "funday"},
    )  # fmt: skip
    assert bad.status == "failed"
    assert "run windows: window 1 'funday': 'funday' is not a day" in bad.errors.data[0].message


def test_core_keys_windows_sets_a_key_s_default_and_refuses_bad_ones(studio_home, keys):
    home = data_paths().home
    save_settings(home, check_settings("Europe/Paris"))
    done = cli("keys", "windows", "alice", NIGHTS)
    assert done.returncode == 0
    assert done.stdout.strip() == f"key alice: its jobs run in {NIGHTS} (Europe/Paris)"
    bad = cli("keys", "windows", "alice", "mon 09:00-09:00")
    assert bad.returncode == 2 and "alice's windows: window 1" in bad.stderr
    assert read_settings(home).owners == {"alice": NIGHTS}  # kept as it was
    assert cli("keys", "windows", "carol", NIGHTS).returncode == 2  # no such key
    cleared = cli("keys", "windows", "alice", "")
    assert "no windows of its own; the studio's default: any time" in cleared.stdout


# -- a running job at its window's close (issue 42 item 3) -----------------------------------


class Ticking(Answers):
    """Answers each request the gate lets in, each taking ``each`` of the clock's time (the
    clock moves on as the request finishes); notes when each of its runs started."""

    def __init__(self, clock: MovingClock, each: timedelta = timedelta(minutes=30)):
        super().__init__()
        self.clock, self.each, self.started = clock, each, []

    def run(self, requests):
        self.started.append(self.clock.now())
        for lines in super().run(requests):
            self.clock.moment += self.each
            yield lines


class PausedStatus(MovingClock):
    """Keeps the job's whole status at the worker's first wait."""

    def sleep(self, seconds: float) -> None:
        if not self.said_while_waiting:
            self.paused = self.job.read_status()
        super().sleep(seconds)


def one_line_each(job) -> list[str]:
    """The custom_ids of the job's result lines, once each, or the test fails."""
    lines = [json.loads(raw) for raw in job.output.read_text().splitlines()]
    ids = [line["custom_id"] for line in lines]
    assert len(ids) == len(set(ids)) and not job.errors.read_text().strip()
    ledger = read_ledger(job)
    assert not ledger.missing and not ledger.coverage_problems()
    return sorted(ids)


def test_a_window_closing_mid_job_pauses_it_and_it_resumes_by_itself_when_it_opens(
    tmp_path, monkeypatch
):
    """Before this change the job ran on past 22:00: all six requests on Monday night."""
    job = make_job(tmp_path, 6)
    rewrite_spec(
        job, run_windows="daily 20:00-22:00", run_windows_zone="UTC", completion_window_hours=None
    )
    queue_job(job)
    clock = PausedStatus(at("2026-12-07T20:00+00:00"), job)  # Monday, as the window opens
    executor = Ticking(clock)
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: executor)
    monkeypatch.setattr(worker, "idle_seconds", lambda home: 0.0, raising=False)

    status = worker.serve(job, clock=clock)

    # four requests of 30 min fill 20:00-22:00; the fifth was not let in at 22:00
    paused = clock.paused
    assert paused.state == "queued" and (paused.done, paused.succeeded) == (4, 4)
    assert paused.pid is None and paused.paused_at == "2026-12-07T22:00:00+00:00"
    says = (
        "paused at the close of its run windows (daily 20:00-22:00 (UTC)) with 4 of 6 "
        "requests done: resumes by itself at Tue 8 Dec 20:00 UTC"
    )
    assert paused.message == says
    # what Monitor, Jobs and the Batch API show of it meanwhile
    assert held_note(job.read_spec(), paused, at("2026-12-08T09:00+00:00")) == says
    assert openai_status(paused) == "in_progress"
    # it went on by itself when the window opened, not before, with the two left
    assert executor.started == [at("2026-12-07T20:00+00:00"), at("2026-12-08T20:00+00:00")]
    assert executor.ran == [f"r{i}" for i in range(6)]  # each once
    assert status.state == "completed" and status.succeeded == 6 and status.runs == 2
    assert one_line_each(job) == [f"r{i}" for i in range(6)]
    states = [h["state"] for h in status.history if "note" not in h]
    assert states[-6:] == ["loading", "running", "queued", "loading", "running", "completed"]


def test_a_paused_job_cancelled_keeps_its_results_and_says_it_was_paused(tmp_path, monkeypatch):
    job = make_job(tmp_path, 6)
    rewrite_spec(
        job, run_windows="daily 20:00-22:00", run_windows_zone="UTC", completion_window_hours=None
    )
    queue_job(job)
    clock = MovingClock(at("2026-12-07T21:00+00:00"), job)
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Ticking(clock))
    paused = worker.run_job(job, clock=clock)  # one run: it stops at 22:00 with two
    assert (paused.state, paused.done) == ("queued", 2)
    assert cancel(job) == "job cancelled while paused: its results stay, and no worker will run it"
    status = job.read_status()
    assert status.state == "cancelled"
    assert status.message == "cancelled while paused outside its run windows, 2 done"
    assert len(job.output.read_text().splitlines()) == 2


class Failing(Ticking):
    """Ticking, but every request it runs fails (a server error, which a retry may fix)."""

    def run(self, requests):
        for lines in super().run(requests):
            yield [error_line(line["custom_id"], "server_error", "the engine failed", 500)
                   for line in lines]  # fmt: skip


@pytest.mark.timeout(60)
def test_a_retry_paused_by_its_window_retries_each_failure_once(tmp_path, monkeypatch):
    """Before this change each night's run retried the failures of the nights before: a
    retry whose requests kept failing never ended."""
    job = make_job(tmp_path, 6)
    queue_job(job)
    clock = MovingClock(at("2026-12-07T08:00+00:00"), job)
    first = Failing(clock, timedelta(0))
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: first)
    assert worker.run_job(job, clock=clock).state == "failed"  # all six failed, any time
    rewrite_spec(
        job, run_windows="daily 20:00-22:00", run_windows_zone="UTC", completion_window_hours=None
    )
    queue_job(job, retry=True)
    clock.moment = at("2026-12-07T21:00+00:00")
    retry = Failing(clock)
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: retry)

    status = worker.serve(job, clock=clock)

    # two retried before 22:00 (failing again), the other four the next night: each once
    assert retry.started == [at("2026-12-07T21:00+00:00"), at("2026-12-08T20:00+00:00")]
    assert retry.ran == [f"r{i}" for i in range(6)]
    assert status.state == "failed" and status.failed == 6 and status.runs == 3
    # a retry asked for anew retries every failure again
    queue_job(job, retry=True)
    clock.moment = at("2026-12-09T20:00+00:00")
    again = Failing(clock, timedelta(0))
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: again)
    worker.serve(job, clock=clock)
    assert sorted(again.ran) == [f"r{i}" for i in range(6)]


class Beside(Ticking):
    """Ticking, with its first run waiting until the other job's executor has started (both
    run at once), and a real pause between requests so that they interleave."""

    def __init__(self, clock, together: threading.Barrier, each=timedelta(0)):
        super().__init__(clock, each)
        self.together = together

    def run(self, requests):
        if len(self.started) == 0:
            self.together.wait()
        for lines in super().run(requests):
            time.sleep(0.01)
            yield lines


def test_a_job_beside_a_paused_one_runs_on_untouched(tmp_path, monkeypatch):
    monkeypatch.setenv(MULTIPROCESSING_ENV, "1")  # side by side, as a resident worker runs
    monkeypatch.setattr(worker, "idle_seconds", lambda home: 0.0, raising=False)
    for name in "ab":
        (tmp_path / name).mkdir()
    windowed = make_job(tmp_path / "a", 6, tmp_path / "jobs")
    other = make_job(tmp_path / "b", 20, tmp_path / "jobs")
    rewrite_spec(
        windowed, run_windows="daily 20:00-22:00", run_windows_zone="UTC",
        completion_window_hours=None,
    )  # fmt: skip
    for job in (windowed, other):
        queue_job(job)
    clock = MovingClock(at("2026-12-07T21:00+00:00"), windowed)
    together = threading.Barrier(2, timeout=10)
    executors = {
        windowed.job_id: Beside(clock, together, timedelta(minutes=30)),
        other.job_id: Beside(clock, together),
    }
    monkeypatch.setattr(worker, "make_executor", lambda spec, d: executors[spec.job_id])

    assert worker.serve(windowed, clock=clock).state == "completed"

    # the windowed job took two requests in before 22:00, the rest the next night
    assert executors[windowed.job_id].started[1] == at("2026-12-08T20:00+00:00")
    assert one_line_each(windowed) == sorted(f"r{i}" for i in range(6))
    # the other job, which has no windows, ran to its end in one run, beside it
    status = other.read_status()
    assert status.state == "completed" and status.runs == 1 and status.paused_at is None
    assert [h["state"] for h in status.history][-3:] == ["loading", "running", "completed"]
    assert one_line_each(other) == sorted(f"r{i}" for i in range(20))
    assert executors[other.job_id].ran == [f"r{i}" for i in range(20)]


# -- the ETA over open hours --------------------------------------------------------------------


def test_the_eta_counts_only_open_hours():
    nights = parse("daily 20:00-07:00", "UTC")
    # 2 h of work at 19:00: nothing runs until 20:00, so it ends at 22:00, 3 h away
    evening = at("2026-12-07T19:00+00:00")
    assert nights.finish_after(evening, 2 * 3600) == at("2026-12-07T22:00+00:00")
    assert open_eta(nights, evening, 2 * 3600) == 3 * 3600
    # 2 h of work at 06:00: 1 h until the 07:00 close, the other from 20:00: 15 h away
    dawn = at("2026-12-08T06:00+00:00")
    assert open_eta(nights, dawn, 2 * 3600) == 15 * 3600
    assert open_eta(None, dawn, 2 * 3600) == 2 * 3600  # no windows: the work itself


def test_monitor_s_eta_of_a_windowed_job_waits_through_the_closed_hours(tmp_path):
    """The speed and the work left give 2 h; Monitor says 15 h, and when it ends."""
    nights = parse("daily 20:00-07:00", "UTC")
    now = at("2026-12-08T06:00+00:00")
    t = time.time()  # the samples are the heartbeat's; the windows are judged at ``now``
    started = datetime.fromtimestamp(t - 20, UTC).isoformat()
    status = JobStatus(state="running", total=100, done=50, started_at=started, heartbeat_at=t)
    status.eta_seconds = 2 * 3600  # the worker's forecast (made just now: no eta_at)
    samples = [{"t": t - 10 + i, "done": 40 + i, "output_tokens": 400 + 10 * i} for i in range(11)]
    plain = rates(samples, status)
    assert round(plain.eta_seconds / 3600, 2) == 2.0
    speed = rates(samples, status, windows=nights, now=now)
    assert round(speed.eta_seconds / 3600, 2) == 15.0
    value, help = eta(status, speed)
    assert value == "15:00:00"
    assert "only the open hours of its run windows, daily 20:00-07:00 (UTC)" in help
    assert "it ends about Tue 8 Dec 21:00 UTC" in help
