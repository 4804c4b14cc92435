"""Jobs side by side in one worker (issue 41 item 1), answered by stand-in executors: the
admission rule, why a job waits, and a cancel that stops one job alone (the real engine:
tests/engine/test_side_by_side_engine.py)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from core.jobs.engine_files import (
    RUNNING_ENV,
    EngineCommand,
    answer_lines,
    ask_engine,
    describe,
    read_state,
    send_command,
)
from core.jobs.folder import CANCEL_SIGNAL, cancel, create_job, queue_job
from core.jobs.ledger import read_ledger
from core.run import worker
from core.run.outputs import Choice, Completion, success_line
from core.run.pool import MULTIPROCESSING_ENV, POOL
from core.run.stopping import StopRequest
from core.schemas import EngineConfig
from tests.support.jobs import StandIn, request_line, stand_in_pool


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


@pytest.fixture
def pool(monkeypatch):
    return stand_in_pool(monkeypatch)


class OnItsEngine(Paced):
    """A job's executor that takes its engine from the pool, as the local executor does (from
    its own thread: the worker's main thread loads it and counts the job as its user), and
    calls ``during`` once, after its third answer."""

    def __init__(self, spec, pace=0.05, together=None, during=None) -> None:
        super().__init__(pace, together)
        self.engine = POOL.get(spec.engine)[0]
        self.during = during

    def run(self, requests):
        for n, lines in enumerate(super().run(requests)):
            if n == 3 and self.during is not None:
                self.during()
            yield lines


def test_engine_unload_while_a_job_runs_keeps_its_engine_and_unloads_the_idle_one(
    tmp_path, monkeypatch, pool
):
    """Issue 41: before, a command waited until no job ran; now it is carried out at once,
    and what a running job uses stays loaded, named with that job."""
    (job,) = jobs(tmp_path, 20)
    POOL.get(EngineConfig(model=str(tmp_path / "idle-model")))  # left by an earlier job
    said: list = []

    def unload() -> None:
        said.append(ask_engine(tmp_path, EngineCommand(action="unload"), timeout=10))
        said.append(read_state(tmp_path))

    executors: dict[str, OnItsEngine] = {}

    def executor(spec, d):
        executors[spec.job_id] = OnItsEngine(spec, during=unload)
        return executors[spec.job_id]

    monkeypatch.setattr(worker, "make_executor", executor)
    status = worker.serve(job)

    answer, state = said
    assert answer is not None, "no answer while the job ran"
    assert answer.unloaded == ["idle-model"] and pool["idle-model"].closed
    assert answer.kept == {"none": [job.job_id]}
    assert answer_lines(answer) == [
        "unloaded idle-model",
        f"none stays loaded: running job {job.job_id} uses it",
    ]
    assert [(m.name, m.job_ids) for m in state.models] == [("none", [job.job_id])]
    # The job ran on undisturbed, on its engine, to every result.
    assert status is not None and (status.state, status.succeeded) == ("completed", 20)
    assert one_result_each(job) and not executors[job.job_id].stopped
    assert executors[job.job_id].ran == [f"r{i}" for i in range(20)]


def test_engine_stop_while_jobs_run_lets_them_finish_then_exits_leaving_the_queue(
    tmp_path, monkeypatch, pool
):
    """Issue 41: a stop lets the running jobs finish (every result line), starts no new
    one, then the worker unloads and exits; the job waiting for a place stays queued."""
    monkeypatch.setenv(RUNNING_ENV, "2")
    a, b, c = jobs(tmp_path, 20, 20, 2)
    together = threading.Barrier(2, timeout=10)
    said: list = []

    def stop() -> None:
        said.append(ask_engine(tmp_path, EngineCommand(action="stop"), timeout=10))
        said.append(read_state(tmp_path))

    made: list[str] = []

    def executor(spec, d):
        made.append(spec.job_id)
        during = stop if spec.job_id == a.job_id else None
        return OnItsEngine(spec, together=together if spec.job_id != c.job_id else None,
                           during=during)  # fmt: skip

    monkeypatch.setattr(worker, "make_executor", executor)
    status = worker.serve(a)

    answer, state = said
    assert answer is not None and answer.running == [a.job_id, b.job_id] and answer.queued == 1
    assert answer_lines(answer)[:2] == [
        f"worker {os.getpid()} is stopping after 2 running jobs: {a.job_id}, {b.job_id}; it "
        "starts no new job, then unloads every model and exits",
        "1 queued job stays queued and starts with the next worker",
    ]
    assert state.stopping and "stopping" in describe(state)[0]
    for job in (a, b):
        assert (job.read_status().state, job.read_status().succeeded) == ("completed", 20)
        assert one_result_each(job)
    assert status is not None and status.state == "completed"
    queued = c.read_status()
    assert queued.state == "queued" and "the next worker" in queued.message
    assert made == [a.job_id, b.job_id] or made == [b.job_id, a.job_id]
    assert POOL.held == {} and pool["none"].closed  # unloaded before it exited
    assert read_state(tmp_path) is None  # and gone


def test_a_job_queued_after_a_stop_still_runs_on_models_loaded_anew(tmp_path, monkeypatch, pool):
    """Its submission found the stopping worker holding the engine and started none: left
    to a next worker, nobody would have run it."""
    monkeypatch.setenv(RUNNING_ENV, "2")
    (a,) = jobs(tmp_path, 20)
    late: list = []

    def stop_then_submit() -> None:
        assert ask_engine(tmp_path, EngineCommand(action="stop"), timeout=10) is not None
        batch = tmp_path / "later.jsonl"
        batch.write_text("".join(request_line(f"r{i}", "hi") + "\n" for i in range(3)))
        made = create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/none"))
        queue_job(made)  # as a submission does, finding the engine's lock held
        late.append(made)

    monkeypatch.setattr(
        worker,
        "make_executor",
        lambda spec, d: OnItsEngine(
            spec, during=stop_then_submit if spec.job_id == a.job_id else None
        ),
    )
    worker.serve(a)

    (d,) = late
    assert (a.read_status().state, d.read_status().state) == ("completed", "completed")
    assert one_result_each(d) and d.read_status().runs == 1
    assert POOL.held == {} and read_state(tmp_path) is None  # then it stopped


def test_engine_stop_read_between_jobs_in_turn_leaves_the_next_queued(tmp_path, monkeypatch):
    """A worker running jobs one at a time reads commands between them: a stop sent while
    its job runs ends the worker after that job, the next left queued (before: it ran on)."""
    monkeypatch.setenv(RUNNING_ENV, "1")
    first, second = jobs(tmp_path, 5, 2)

    class Stopping(Paced):
        def run(self, requests):
            for n, lines in enumerate(super().run(requests)):
                if n == 1:
                    send_command(tmp_path, EngineCommand(action="stop"))
                yield lines

    executors = {first.job_id: Stopping(), second.job_id: Paced()}
    monkeypatch.setattr(worker, "make_executor", lambda spec, d: executors[spec.job_id])

    assert worker.serve(first).state == "completed" and one_result_each(first)
    assert second.read_status().state == "queued"
    assert not executors[second.job_id].started.is_set()


def jobs_on(tmp_path, *models: str, count: int = 3):
    """One queued job of ``count`` requests on each model folder name (``/models/NAME``)."""
    made = []
    for n, model in enumerate(models):
        batch = tmp_path / f"m{n}.jsonl"
        batch.write_text("".join(request_line(f"r{i}", "hi") + "\n" for i in range(count)))
        job = create_job(batch, tmp_path / "jobs", EngineConfig(model=f"/models/{model}"))
        queue_job(job)
        made.append(job)
    return made


class HeldLoads:
    """The pool's loads, each held until ``release`` is set (at most ``hold`` seconds):
    a model that takes long to load. ``began`` is set as each load begins; a signal to
    the worker meanwhile interrupts the wait (and its handler may raise)."""

    def __init__(self, monkeypatch, hold: float = 20.0, only: str | None = None) -> None:
        self.engines = stand_in_pool(monkeypatch)
        self.began, self.release, self.hold = threading.Event(), threading.Event(), hold
        load = POOL._load

        def held(config):
            if only in (None, config.model_name):  # ``only``: that model's load alone
                self.began.set()
                ends = time.monotonic() + self.hold
                # In slices, as a load runs Python code: a signal that reached another thread
                # is handled in this one at its next bytecode.
                while not self.release.wait(0.05) and time.monotonic() < ends:
                    pass
            return load(config)

        monkeypatch.setattr(POOL, "_load", held)


def message_of(job, starts: str, timeout: float = 10.0) -> str:
    """The job's status message once it starts with ``starts`` (else the last one seen)."""
    deadline = time.monotonic() + timeout
    while True:
        message = job.read_status().message
        if message.startswith(starts) or time.monotonic() > deadline:
            return message
        time.sleep(0.02)


def in_thread(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("models", [("alpha", "alpha"), ("alpha", "beta")])
@pytest.mark.parametrize("asks", ["before the load", "during the load"])
def test_a_job_waiting_for_another_jobs_load_says_so(tmp_path, monkeypatch, models, asks):
    """Issue 41: before, both jobs said ``loading the model`` while the second waited for
    the first's load (one load at a time, in the worker's main thread). The second asks
    for its engine once the first's ask waits (both then wait when the load begins), or
    once the load has begun."""
    a, b = jobs_on(tmp_path, *models)
    loads = HeldLoads(monkeypatch)
    serve = worker.Loads.serve
    if asks == "before the load":  # the main thread serves once both have asked
        monkeypatch.setattr(
            worker.Loads, "serve", lambda self: len(self.waiting()) > 1 and serve(self)
        )

    def executor(spec, d):
        if spec.job_id == b.job_id:
            while asks == "before the load" and not (POOL.loads and POOL.loads.waiting()):
                time.sleep(0.01)
            assert asks == "before the load" or loads.began.wait(10)
        return OnItsEngine(spec, pace=0.01)

    monkeypatch.setattr(worker, "make_executor", executor)
    seen: list[str] = []

    def watch() -> None:
        if loads.began.wait(10):
            seen.extend([message_of(a, "loading"), message_of(b, "waiting for")])
        loads.release.set()

    watcher = in_thread(watch)
    worker.serve(a)
    watcher.join(5)

    first, second = models
    waits = f"waiting for {first} to finish loading for job {a.job_id}"
    if first != second:
        waits += f", then loading {second} (models load one at a time)"
    assert seen == [f"loading {first}", waits]
    for job in (a, b):
        assert job.read_status().state == "completed" and one_result_each(job)


def test_a_job_whose_model_waits_for_memory_says_which_models_and_jobs_hold_it(
    tmp_path, monkeypatch, pool
):
    """Admitted while both fitted, the second job's model no longer fits once the first's
    is loaded: it says what it waits for until the first job ends, then loads."""
    a, b = jobs_on(tmp_path, "alpha", "beta", count=20)
    POOL.measured["/models/beta"] = 3 << 30
    monkeypatch.setattr(POOL, "_available", lambda: (2 << 30) if POOL.held else 1 << 40)
    alpha_loaded, seen = threading.Event(), []

    def executor(spec, d):
        if spec.job_id == a.job_id:
            got = OnItsEngine(spec, pace=0.05, during=lambda: seen.append(message_of(b, "wait")))
            alpha_loaded.set()
            return got
        assert alpha_loaded.wait(10)  # asks once the first job runs on its engine
        return OnItsEngine(spec, pace=0.01)

    monkeypatch.setattr(worker, "make_executor", executor)
    worker.serve(a)

    assert seen == [
        f"waiting for memory: beta needs ~3.0 GiB beside the loaded alpha (used by running "
        f"job {a.job_id}); it loads when one of them ends"
    ]
    for job in (a, b):
        assert job.read_status().state == "completed" and one_result_each(job)
    assert b.read_status().finished_at > a.read_status().finished_at


def test_loading_says_the_models_last_load_time():
    from core.run.pool import loading_said

    assert loading_said("SmolLM2-135M-Instruct", 14.2) == (
        "loading SmolLM2-135M-Instruct (last load took 14 s)"
    )
    assert loading_said("big", 125) == "loading big (last load took 2 min 5 s)"
    assert loading_said("new", None) == "loading new"


def resumed(job) -> None:
    """Runs the job again (Resume), answered at once: each request without a result runs."""
    queue_job(job)  # as Resume does, before it starts a worker
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(worker, "make_executor", lambda spec, d: Paced(0.0))
        assert worker.run_job(job).state == "completed"
    assert one_result_each(job)


def test_a_sigterm_during_a_load_ends_it_and_the_worker_at_once(tmp_path, monkeypatch, signals):
    """Issue 41: before, the worker's main thread went on loading (the signal only noted)
    and stopped the jobs once the model had loaded, minutes later for a big one. Now the
    load ends at once, every job stops as on any SIGTERM (its status says why), nothing
    stays loaded, and Resume runs exactly the requests without a result."""
    loading, running = jobs_on(tmp_path, "alpha", "beta", count=40)
    queued = jobs_on(tmp_path, "beta", count=2)[0]  # beyond the cap: for the next worker
    monkeypatch.setenv(RUNNING_ENV, "2")
    loads = HeldLoads(monkeypatch, only="alpha")

    def executor(spec, d):
        if spec.job_id == loading.job_id:  # asks once the other job runs on its engine
            while not (running.read_status().done and loads.engines.get("beta")):
                time.sleep(0.01)
        return OnItsEngine(spec, pace=0.05)

    monkeypatch.setattr(worker, "make_executor", executor)
    in_thread(lambda: loads.began.wait(10) and os.kill(os.getpid(), signal.SIGTERM))
    began = time.monotonic()
    worker.serve(loading, stop=signals)
    took = time.monotonic() - began

    assert loads.began.is_set() and took < 10, f"the load went on: {took:.1f} s"
    assert "alpha" not in loads.engines  # the load never finished
    assert POOL.held == {} and loads.engines["beta"].closed
    for job in (loading, running):
        status = job.read_status()
        assert status.state == "cancelled", status
        assert "its worker was asked to stop" in status.message
    assert loading.read_status().done == 0 and 0 < running.read_status().done < 40
    assert queued.read_status().state == "queued"
    for job in (loading, running, queued):
        resumed(job)


@pytest.mark.parametrize("signum", [signal.SIGTERM, CANCEL_SIGNAL])
def test_a_signal_during_an_in_process_load_stops_it_at_once(
    tmp_path, monkeypatch, signals, signum
):
    """A worker running jobs in turn (in-process engines) loads in the job's own thread:
    the handler raises there, ending the load. SIGTERM ends the worker, leaving the next
    job queued; a Cancel ends that job alone, and the next runs."""
    monkeypatch.setenv(MULTIPROCESSING_ENV, "0")
    first, second = jobs_on(tmp_path, "alpha", "beta", count=3)
    loads = HeldLoads(monkeypatch, only="alpha")
    monkeypatch.setattr(worker, "make_executor", lambda spec, d: OnItsEngine(spec, pace=0.01))

    def send() -> None:
        if loads.began.wait(10):
            if signum == CANCEL_SIGNAL:
                assert "cancelling" in cancel(first)  # as the Jobs page's Cancel does
            else:
                os.kill(os.getpid(), signum)

    in_thread(send)
    began = time.monotonic()
    worker.serve(first, stop=signals)

    assert time.monotonic() - began < 10 and "alpha" not in loads.engines
    status = first.read_status()
    assert (status.state, status.done) == ("cancelled", 0)
    leaving = signum == signal.SIGTERM
    assert ("its worker was asked to stop" in status.message) == leaving
    assert second.read_status().state == ("queued" if leaving else "completed")
    assert POOL.held == {}
    resumed(first)


def test_core_jobs_list_says_what_a_loading_job_waits_for(studio_home, capsys):
    import argparse

    from core.cli.jobs import cmd_jobs_list
    from tests.support.jobs import monitored_job
    from tests.support.live_progress import running_status

    job = monitored_job(studio_home)
    status = running_status(total=1)
    why = "waiting for alpha to finish loading for job job_1"
    status.enter("loading", why)
    job.write_status(status)
    assert cmd_jobs_list(argparse.Namespace(json=False)) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith(f"{job.job_id}  loading") and line.endswith(f"({why})")
    cmd_jobs_list(argparse.Namespace(json=True))
    [row] = json.loads(capsys.readouterr().out)
    assert (row["state"], row["message"]) == ("loading", why)


def test_a_cancel_during_a_side_by_side_load_ends_that_job_once_it_has_loaded(
    tmp_path, monkeypatch, signals
):
    """The main thread finishes the load it is in (a Cancel's handler only notes the
    signal: ending a load half done would leave an engine no pool holds), then stops the
    cancelled job alone: the job that waits for the same model gets the engine and runs
    on, and Resume runs the cancelled job's requests without a result."""
    doomed, other = jobs_on(tmp_path, "alpha", "alpha", count=20)
    loads = HeldLoads(monkeypatch)
    serve = worker.Loads.serve
    monkeypatch.setattr(worker.Loads, "serve", lambda self: len(self.waiting()) > 1 and serve(self))

    def executor(spec, d):
        while spec.job_id == other.job_id and not (POOL.loads and POOL.loads.waiting()):
            time.sleep(0.01)  # asks after the doomed job: its load comes first
        return OnItsEngine(spec, pace=0.02)

    monkeypatch.setattr(worker, "make_executor", executor)

    def cancel_then_load() -> None:
        if loads.began.wait(10):
            assert "cancelling" in cancel(doomed)
            time.sleep(0.3)
        loads.release.set()

    in_thread(cancel_then_load)
    worker.serve(doomed, stop=signals)

    status = doomed.read_status()
    assert status.state == "cancelled" and "asked to stop" not in status.message
    assert status.done < 20 and len(loads.engines) == 1  # alpha loaded once
    kept = other.read_status()
    assert (kept.state, kept.succeeded) == ("completed", 20) and one_result_each(other)
    resumed(doomed)


def test_a_queued_job_whose_model_does_not_fit_says_how_much_beside_what(
    tmp_path, monkeypatch, pool
):
    """The queue's memory wait is worded by the rule of a load's (EnginePool.memory_wait)."""
    (running,) = jobs_on(tmp_path, "alpha", count=20)
    POOL.measured["/models/beta"] = 3 << 30
    monkeypatch.setattr(POOL, "_available", lambda: (2 << 30) if POOL.held else 1 << 40)
    seen: list[str] = []

    def submit_beside() -> None:  # queued while the first job runs on alpha
        batch = tmp_path / "late.jsonl"
        batch.write_text(request_line("r0", "hi") + "\n")
        late = create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/beta"))
        queue_job(late)
        seen.append(message_of(late, "queued: waits for memory"))

    def executor(spec, d):
        return OnItsEngine(spec, during=submit_beside if spec.job_id == running.job_id else None)

    monkeypatch.setattr(worker, "make_executor", executor)
    worker.serve(running)

    assert seen == [
        f"queued: waits for memory: beta needs ~3.0 GiB beside the loaded alpha (used by "
        f"running job {running.job_id}); it starts when one of them ends"
    ]
