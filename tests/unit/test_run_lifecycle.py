"""Issue 38, items 2-4: a cancel that holds, jobs a dead worker left resume by themselves
(once), and a full disk fails the job with its reason. A stand-in executor feeds the real
worker lines; no engine."""

import errno
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from core.api.batch_view import batch_of
from core.jobs import engine_files, recovery
from core.jobs import folder as folder_module
from core.jobs.folder import cancel, queue_job
from core.jobs.ledger import read_ledger, verify_chain
from core.run import worker
from tests.support.jobs import Answers, make_job

DEAD_PID = 2**22 + 7  # no such process


def states(job) -> list[str]:
    return [h["state"] for h in job.read_status().history if "note" not in h]


def test_a_job_cancelled_before_its_worker_takes_it_never_runs(tmp_path, monkeypatch):
    answers = Answers()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: answers)
    job = make_job(tmp_path, 3)
    queue_job(job)
    assert "no worker will run it" in cancel(job)
    status = worker.run_job(job)  # the worker that had already picked it from the queue
    assert status.state == "cancelled" and answers.ran == []
    assert states(job) == ["created", "queued", "cancelled"]  # never loading nor running
    assert not job.output.exists() or not job.output.read_text()


def test_a_cancel_waits_for_a_worker_taking_the_job_and_then_signals_it(tmp_path, monkeypatch):
    """The race of the issue: the worker takes the job under the status lock; a cancel in
    that moment waits, then finds the worker's pid and signals it, never writes over it."""
    job = make_job(tmp_path, 1)
    queue_job(job)
    signalled = []
    monkeypatch.setattr(folder_module.os, "kill", lambda pid, sig: signalled.append((pid, sig)))
    answer: list[str] = []
    with job.status_lock():  # the worker, in the middle of taking the job
        canceller = threading.Thread(target=lambda: answer.append(cancel(job)))
        canceller.start()
        time.sleep(0.3)
        assert canceller.is_alive()  # waits for the lock
        status = job.read_status()
        status.enter("loading", "taken")
        status.pid, status.heartbeat_at = os.getpid(), time.time()
        job.write_status(status)
    canceller.join(5)
    assert signalled and signalled[0][0] == os.getpid()
    assert job.read_status().state == "loading"  # the worker's; its own end says cancelled
    assert "cancelling" in answer[0]


def _die(job) -> None:
    """As a worker killed mid-job leaves its job: running, its pid gone."""
    status = job.read_status()
    status.enter("running", "running 4 requests")
    status.pid, status.heartbeat_at = DEAD_PID, time.time() - 60
    status.runs += 1
    job.write_status(status)


def test_a_job_its_worker_left_resumes_by_itself_once_then_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Answers())
    job = make_job(tmp_path, 4)
    queue_job(job)
    _die(job)
    assert job.read_status().interrupted
    assert recovery.requeue_interrupted(job.path.parent) == [job.job_id]
    status = job.read_status()
    assert status.state == "queued" and status.interruptions == 1
    assert any("resumed by itself" in h.get("note", "") for h in status.history)
    assert worker.run_job(job).state == "completed"
    assert sorted(read_ledger(job).succeeded) == ["r0", "r1", "r2", "r3"]

    # A job that keeps killing its worker: the second time it fails, with the reason.
    job2 = make_job(tmp_path, 2, tmp_path / "jobs")
    queue_job(job2)
    _die(job2)
    recovery.requeue_interrupted(job2.path.parent)
    _die(job2)  # killed again after the resume
    assert recovery.requeue_interrupted(job2.path.parent) == []
    failed = job2.read_status()
    assert failed.state == "failed" and "stopped while running it 2 times" in failed.error
    assert "Resume runs the requests left" in failed.message
    queue_job(job2)  # a person's Resume: another chance
    assert job2.read_status().interruptions == 0


def test_a_worker_that_starts_resumes_the_jobs_a_dead_one_left(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Answers())
    monkeypatch.setattr(worker, "idle_seconds", lambda home: 0.0, raising=False)
    job = make_job(tmp_path, 3)
    queue_job(job)
    _die(job)
    worker.serve(None, job.path.parent)  # `--resident JOBS_DIR`, as recovery wakes it
    status = job.read_status()
    assert status.state == "completed" and status.succeeded == 3
    assert states(job)[-5:] == ["running", "queued", "loading", "running", "completed"]


def test_the_batch_api_says_an_interrupted_batch_resumes_and_wakes_a_worker(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(engine_files.subprocess, "Popen", lambda args, **kw: started.append(args))
    recovery._woken.clear()
    job = make_job(tmp_path, 2)
    queue_job(job)
    _die(job)
    batch = batch_of(job)
    assert batch["status"] == "in_progress"  # never "in_progress" for ever: it resumes
    (error,) = batch["errors"]["data"]
    assert error["code"] == "worker_stopped" and "resumes by itself" in error["message"]
    assert started and started[0][-2:] == ["--resident", str(job.path.parent)]
    recovery.requeue_interrupted(job.path.parent)
    assert batch_of(job)["status"] == "in_progress"  # queued to resume: it has run


def test_a_full_disk_mid_run_fails_the_job_with_its_reason_and_no_torn_line(tmp_path, monkeypatch):
    """The disk fills in the middle of a chunk: the kernel takes part of it, then says
    ENOSPC, and every later write of a file fails too (a status as well)."""
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Answers("x" * 500))
    job = make_job(tmp_path, 6)
    queue_job(job)
    full = {"now": False, "writes": 0}
    real_write = os.write

    def write(fd, data):
        if full["now"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        full["writes"] += 1
        if full["writes"] == 4:  # this chunk: half of it, then the disk is full
            full["now"] = True
            return real_write(fd, bytes(data[: len(data) // 2]))
        return real_write(fd, data)

    real_atomic = folder_module.write_atomic

    def write_atomic(path, data):
        if full["now"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_atomic(path, data)

    monkeypatch.setattr("core.jobs.output_file.os.write", write)
    monkeypatch.setattr(folder_module, "write_atomic", write_atomic)
    status = worker.run_job(job)
    assert status.state == "failed" and "the disk is full" in status.message
    saved = job.read_status()  # written into the space held for it
    assert saved.state == "failed" and "No space left on device" in saved.error
    assert job.output.read_bytes().endswith(b"\n")  # no torn last line
    assert verify_chain(job.output) == (3, [])
    monkeypatch.setattr("core.jobs.output_file.os.write", real_write)
    monkeypatch.setattr(folder_module, "write_atomic", real_atomic)
    queue_job(job)  # space freed; Resume
    assert worker.run_job(job).state == "completed"
    assert verify_chain(job.output) == (6, [])


REAL_DISK = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from tests.support.jobs import Answers, make_job
    from core.jobs.folder import queue_job
    from core.jobs.ledger import verify_chain
    from core.run import worker

    disk = Path(sys.argv[1])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], check=True)
    worker.make_executor = lambda spec, job_dir: Answers("x" * 3000)
    job = make_job(disk, 1500)
    queue_job(job)
    first = worker.run_job(job)
    saved = job.read_status()
    lines = len(job.output.read_bytes().splitlines())
    tail = job.output.read_bytes()[-1:]
    subprocess.run(["mount", "-o", "remount,size=12m", str(disk)], check=True)  # room
    queue_job(job)
    second = worker.run_job(job)
    print(json.dumps({
        "first": first.state, "saved": saved.state, "message": saved.message,
        "error": saved.error, "tail": tail.decode(), "lines": lines,
        "second": second.state,
        "chain": list(verify_chain(job.output)), "succeeded": second.succeeded,
    }))
    """
)


def test_a_real_full_disk_fails_the_job_and_a_resume_after_space_is_freed_completes(tmp_path):
    """On a real file system that fills (a 3 MiB tmpfs, in a mount namespace of its own):
    the status says failed with the reason, the output ends in a whole line, and the job
    completes once there is room."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small file system")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "real_disk.py"
    script.write_text(REAL_DISK)
    repo = str(Path(__file__).resolve().parents[2])
    command = ["unshare", "--mount", "--map-root-user", sys.executable, str(script), str(disk)]
    done = subprocess.run([*command, repo], capture_output=True, text=True, timeout=300, cwd=repo)
    if done.returncode and "unshare" in done.stderr and "Operation not permitted" in done.stderr:
        pytest.skip("this machine does not let a test mount a file system")
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    result = json.loads(done.stdout.splitlines()[-1])
    assert (result["first"], result["saved"]) == ("failed", "failed"), result
    assert "the disk is full" in result["message"] and "No space left" in result["error"]
    assert result["tail"] == "\n" and 0 < result["lines"] < 1500
    assert result["second"] == "completed" and result["succeeded"] == 1500
    assert result["chain"] == [1500, []]
