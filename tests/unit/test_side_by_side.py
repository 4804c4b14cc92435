"""Jobs side by side in one worker (issue 41 item 1), answered by stand-in executors: the
admission rule, why a job waits, and a cancel that stops one job alone (the real engine:
tests/engine/test_side_by_side_engine.py)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from core.jobs.engine_files import RUNNING_ENV
from core.jobs.folder import CANCEL_SIGNAL, cancel, create_job, queue_job
from core.jobs.ledger import read_ledger
from core.run import worker
from core.run.outputs import Choice, Completion, success_line
from core.run.pool import MULTIPROCESSING_ENV
from core.run.stopping import StopRequest
from core.schemas import EngineConfig
from tests.support.jobs import StandIn, request_line


class Paced(StandIn):
    """Answers one request every ``pace`` seconds, as an engine does, until stopped;
    ``together`` makes its first answer wait until the other jobs' executors have started
    (a worker running jobs in turn never gets there: that job fails)."""

    def __init__(self, pace: float = 0.02, together: threading.Barrier | None = None) -> None:
        self.pace, self.together = pace, together
        self.ran: list[str] = []
        self.started = threading.Event()

    def run(self, requests):
        self.started.set()
        if self.together is not None:
            self.together.wait()
        for request in requests:
            if self.stopped:
                return
            time.sleep(self.pace)
            self.ran.append(request.custom_id)
            yield [success_line(request.custom_id, "m", Completion(2, [Choice("ok", "stop", 1)]))]


def jobs(tmp_path, *counts: int):
    made = []
    for n, count in enumerate(counts):
        batch = tmp_path / f"b{n}.jsonl"
        batch.write_text("".join(request_line(f"r{i}", "hi") + "\n" for i in range(count)))
        job = create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/none"))
        queue_job(job)
        made.append(job)
    return made


def one_result_each(job) -> bool:
    ledger = read_ledger(job)
    return not ledger.missing and not ledger.coverage_problems()


@pytest.fixture(autouse=True)
def engines_in_processes(monkeypatch):
    """Side by side where engine cores run in processes of their own (a resident worker)."""
    monkeypatch.setenv(MULTIPROCESSING_ENV, "1")


@pytest.fixture
def signals():
    """The worker's signal handlers, as ``core.run.worker.main`` installs them."""
    stop = StopRequest()
    signums = (CANCEL_SIGNAL, signal.SIGINT, signal.SIGTERM)
    saved = {s: signal.signal(s, stop.on_signal) for s in signums}
    yield stop
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_queued_jobs_run_side_by_side_each_with_all_its_results(tmp_path, monkeypatch):
    """Before this change the worker ran them in turn: the first waited for the second's
    start forever (the barrier breaks: that job failed)."""
    long, short = jobs(tmp_path, 30, 3)
    together = threading.Barrier(2, timeout=10)
    executors = {long.job_id: Paced(0.05, together), short.job_id: Paced(0.02, together)}
    monkeypatch.setattr(worker, "make_executor", lambda spec, d: executors[spec.job_id])

    status = worker.serve(long)

    assert status is not None and status.state == "completed" and status.succeeded == 30
    assert short.read_status().state == "completed"
    assert short.read_status().succeeded == 3
    assert one_result_each(long) and one_result_each(short)
    # The small job ended while the long one still ran.
    assert short.read_status().finished_at < long.read_status().finished_at


@pytest.mark.parametrize("cap, engines_in", [("1", "1"), ("4", "0")])
def test_a_cap_of_one_or_an_in_process_engine_runs_them_in_turn(
    tmp_path, monkeypatch, cap, engines_in
):
    monkeypatch.setenv(RUNNING_ENV, cap)
    monkeypatch.setenv(MULTIPROCESSING_ENV, engines_in)
    first, second = jobs(tmp_path, 3, 3)
    order: list[str] = []
    executors = {first.job_id: Paced(), second.job_id: Paced()}

    def executor(spec, d):
        order.append(spec.job_id)
        assert threading.current_thread() is threading.main_thread()  # as before: no thread
        assert all(not e.started.is_set() or len(e.ran) == 3 for e in executors.values())
        return executors[spec.job_id]

    monkeypatch.setattr(worker, "make_executor", executor)
    assert worker.serve(first).state == "completed"
    assert second.read_status().state == "completed"
    assert order == [first.job_id, second.job_id]
    assert executors[first.job_id].ran == ["r0", "r1", "r2"]


def test_a_job_beyond_the_cap_waits_and_says_for_which_jobs(tmp_path, monkeypatch):
    monkeypatch.setenv(RUNNING_ENV, "2")
    a, b, c = jobs(tmp_path, 20, 20, 2)
    together = threading.Barrier(2, timeout=10)
    said: list[str] = []

    class Watching(Paced):
        def run(self, requests):
            for n, lines in enumerate(super().run(requests)):
                if n == 3:
                    said.append(c.read_status().message)
                yield lines

    executors = {a.job_id: Watching(0.05, together), b.job_id: Paced(0.05, together)}
    executors[c.job_id] = Paced()
    monkeypatch.setattr(worker, "make_executor", lambda spec, d: executors[spec.job_id])

    assert worker.serve(a).state == "completed"
    assert said == [
        f"queued: waits for a free place beside {a.job_id}, {b.job_id} (at most 2 at once)"
    ]
    assert [j.read_status().state for j in (b, c)] == ["completed", "completed"]


def test_a_cancel_of_one_running_job_leaves_the_other_completing(tmp_path, monkeypatch, signals):
    """The cancel file names the job, the signal only wakes the worker (its handler takes
    no lock): the cancelled job ends with the results it made, the other runs on."""
    doomed, other = jobs(tmp_path, 40, 20)
    together = threading.Barrier(2, timeout=10)

    class Cancelling(Paced):
        def run(self, requests):
            for n, lines in enumerate(super().run(requests)):
                if n == 2:
                    assert "cancelling" in cancel(doomed)  # as the Jobs page's Cancel does
                yield lines

    executors = {doomed.job_id: Paced(0.05, together), other.job_id: Cancelling(0.05, together)}
    monkeypatch.setattr(worker, "make_executor", lambda spec, d: executors[spec.job_id])

    status = worker.serve(doomed, stop=signals)

    assert status is not None and status.state == "cancelled"
    assert 0 < status.done < 40 and f"{status.left:,} were cancelled without one" in status.message
    assert "asked to stop" not in status.message  # a cancel, not the worker's end
    kept = other.read_status()
    assert (kept.state, kept.succeeded) == ("completed", 20) and one_result_each(other)
    assert not executors[other.job_id].stopped
    assert not doomed.cancel_file.exists() or doomed.read_status().is_final


def test_a_sigterm_stops_every_running_job_and_the_worker_leaves_the_queue(
    tmp_path, monkeypatch, signals
):
    monkeypatch.setenv(RUNNING_ENV, "2")
    a, b, c = jobs(tmp_path, 40, 40, 2)
    together = threading.Barrier(2, timeout=10)

    class Terminating(Paced):
        def run(self, requests):
            for n, lines in enumerate(super().run(requests)):
                if n == 2:
                    os.kill(os.getpid(), signal.SIGTERM)  # a service manager's stop
                yield lines

    executors = {a.job_id: Paced(0.05, together), b.job_id: Terminating(0.05, together)}
    monkeypatch.setattr(worker, "make_executor", lambda spec, d: executors[spec.job_id])

    worker.serve(a, stop=signals)

    for job in (a, b):
        status = job.read_status()
        assert status.state == "cancelled" and 0 < status.done < 40
        assert "its worker was asked to stop" in status.message
    assert c.read_status().state == "queued"  # for the next worker
    assert signals.leaving
