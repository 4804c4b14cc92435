"""The queue and the engine lock (no engine)."""

import os
import signal
import subprocess
import sys
import threading
import time

import psutil

from core.jobs.queue import EngineLock, position, queued_jobs, set_priority
from core.schemas import JobStatus
from tests.support.jobs import finished_job


def test_queued_jobs_run_by_priority_then_age(tmp_path):
    jobs = []
    for name in ("first", "second", "third"):
        job = finished_job(tmp_path, {name: "x"})
        job.write_status(JobStatus(state="queued"))
        jobs.append(job)
        time.sleep(0.01)
    done = finished_job(tmp_path, {"done": "x"})  # completed: not in the queue
    set_priority(jobs[2], 5)
    order = [j.job_id for j in queued_jobs(tmp_path / "jobs")]
    assert order == [jobs[2].job_id, jobs[0].job_id, jobs[1].job_id]
    assert position(jobs[0], tmp_path / "jobs") == 2
    assert position(done, tmp_path / "jobs") is None


def test_one_worker_holds_the_engine_at_a_time(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from core.jobs.queue import EngineLock; "
         "lock = EngineLock(Path(sys.argv[1])); assert lock.acquire(); print('held', flush=True);"
         " time.sleep(30)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = EngineLock(tmp_path)
        assert not lock.acquire()
        assert lock.holder() == holder.pid
    finally:
        holder.kill()
        holder.wait()
    assert lock.acquire()  # the kernel dropped the dead worker's lock
    lock.release()
    assert EngineLock(tmp_path).holder() is None


def test_a_killed_workers_forked_child_does_not_keep_the_engine_from_the_next_worker(tmp_path):
    """An engine's helper process forked from the worker shares its lock file; killed with
    -9, the worker must not leave the engine taken by that child (a Resume then waited
    forever), and the next worker takes the lock while the child still runs."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys, time; from pathlib import Path; from core.jobs.queue import EngineLock; "
         "lock = EngineLock(Path(sys.argv[1])); assert lock.acquire(); child = os.fork()\n"
         "if child == 0: time.sleep(60); os._exit(0)\n"
         "print(child, flush=True); time.sleep(60)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    child = int(holder.stdout.readline())
    try:
        holder.kill()
        holder.wait()
        assert psutil.pid_exists(child)  # the forked child outlives its worker
        lock = EngineLock(tmp_path)
        assert lock.holder() is None  # nobody alive holds it: a Resume starts a worker
        assert lock.acquire_from_the_dead(seconds=10)
        lock.release()
    finally:
        os.kill(child, signal.SIGKILL)


def test_core_run_follows_a_job_the_engines_worker_runs_and_takes_it_up_if_that_one_ends(
    tmp_path, monkeypatch
):
    from core.cli import jobs as cli

    job = finished_job(tmp_path, {"a": "x"})
    job.write_status(JobStatus(state="queued"))
    holder = EngineLock(tmp_path / "jobs")
    assert holder.acquire()  # the resident worker: submit started no worker (None)
    taken: list[str] = []

    def take_up(job):  # a worker started for the stranded job runs it
        taken.append(job.job_id)
        job.write_status(JobStatus(state="completed"))

    monkeypatch.setattr(cli, "take_up", take_up)
    monkeypatch.setattr(cli, "FOLLOW_SECONDS", 0.01)
    assert "the engine's worker" in cli.who_runs(job, None)
    threading.Timer(0.3, holder.release).start()  # it exits with the job still queued

    status = cli.follow(job, None)

    assert taken == [job.job_id] and status.state == "completed"


def test_core_run_says_once_that_its_run_window_paused_its_job(tmp_path, monkeypatch, capsys):
    """A job its run window paused goes back to the queue (core.run.worker): the command
    following it said only "queued" until it resumed, hours later."""
    from core.cli import jobs as cli

    job = finished_job(tmp_path, {"a": "x"})
    says = "paused at the close of its run windows (daily 20:00-22:00 (UTC)): resumes at 20:00"
    job.write_status(JobStatus(state="queued", paused_at="2026-12-07T22:00:00+00:00", message=says))
    monkeypatch.setattr(cli, "FOLLOW_SECONDS", 0.01)

    class Running:  # the worker that will resume it, alive
        def poll(self):
            return None

    threading.Timer(0.3, lambda: job.write_status(JobStatus(state="completed"))).start()
    status = cli.follow(job, Running())

    assert status.state == "completed"
    assert capsys.readouterr().err.count(says) == 1  # said once, not at every look
