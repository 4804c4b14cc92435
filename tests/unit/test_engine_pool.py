"""The resident worker's rules without a model: which engines stay loaded, the idle time,
and the files the UI and the CLI talk to it through (the real engine: test_resident.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from core.config import REPO_ROOT
from core.jobs.engine_files import (
    BUDGET_ENV,
    IDLE_ENV,
    EngineCommand,
    EngineSettings,
    idle_seconds,
    read_state,
    send_command,
    take_commands,
    write_settings,
)
from core.jobs.folder import mark_queue_changed, queue_changed_at
from core.jobs.queue import EngineLock
from core.jobs.submit import Submission, submit
from core.run.monitoring import ResourceSampler
from core.run.pool import (
    MULTIPROCESSING_ENV,
    EnginePool,
    budget_bytes,
    max_engines,
    tree_rss,
)
from core.run.resident import Resident
from core.schemas import EngineConfig

GIB = 1 << 30


class Loaded:
    """Stands in for a loaded engine: the pool's rules are what these tests check."""

    def __init__(self, config: EngineConfig, log: list[str]) -> None:
        self.config, self.log, self.load_seconds = config, log, 1.5
        log.append(f"load {config.model_name}")

    def close(self) -> None:
        self.log.append(f"unload {self.config.model_name}")


def pool(
    available_gib: float, max_engines: int | None = 3, budget_gib: float | None = None
) -> tuple[EnginePool, list[str]]:
    log: list[str] = []
    memory = {"used": 0}

    def load(config: EngineConfig) -> Loaded:
        memory["used"] += 2 * GIB  # every model here takes 2 GiB
        return Loaded(config, log)

    def available() -> int:
        held = sum(2 * GIB for _ in engines.held)
        return int(available_gib * GIB) - held

    budget = None if budget_gib is None else int(budget_gib * GIB)
    engines = EnginePool(
        load, lambda: memory["used"], available, lambda: max_engines, lambda: budget
    )
    return engines, log


def model(tmp_path: Path, name: str) -> EngineConfig:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "model.safetensors").write_bytes(b"\0" * 1024)
    return EngineConfig(model=str(folder), cpu_kv_cache_gib=1)


def test_a_job_on_a_loaded_model_gets_it_without_loading_again(tmp_path):
    engines, log = pool(available_gib=16)
    a = model(tmp_path, "a")
    first, seconds = engines.get(a)
    again, again_seconds = engines.get(a)
    assert again is first and log == ["load a"]
    assert (seconds, again_seconds) == (1.5, 0.0)


def test_another_model_loads_beside_when_memory_allows(tmp_path):
    engines, log = pool(available_gib=16)
    engines.get(model(tmp_path, "a"))
    engines.get(model(tmp_path, "b"))
    assert log == ["load a", "load b"]
    assert engines.measured[str(tmp_path / "b")] == 2 * GIB  # what its load took


def test_the_least_recently_used_model_is_unloaded_when_memory_is_short(tmp_path):
    # 6 GiB: two models (2 GiB each) and the 1 GiB reserve fit; then a third model's
    # weights, 1 GiB KV cache (and its engine processes' own memory) do not.
    engines, log = pool(available_gib=6)
    a, b, c = (model(tmp_path, n) for n in "abc")
    engines.get(a)
    engines.get(b)
    engines.get(a)  # a used last: b is the least recently used
    engines.get(c)
    assert log == ["load a", "load b", "unload b", "load c"]
    assert [cfg.model_name for cfg in engines.held] == ["a", "c"]


def test_an_engine_a_running_job_uses_is_never_unloaded_for_another_job(tmp_path):
    """Issue 41 item 1: jobs side by side. With a and b in use, c does not fit (6 GiB hold
    two): its job waits instead of evicting; once b's job ends, b makes room as before."""
    engines, log = pool(available_gib=6)
    a, b, c = (model(tmp_path, n) for n in "abc")
    engines.get(a, user="job 1")
    engines.get(b, user="job 2")
    assert engines.can_load(a) and not engines.can_load(c)
    engines.release("job 2")
    assert engines.can_load(c)
    engines.get(c, user="job 3")
    assert log == ["load a", "load b", "unload b", "load c"]  # a, in use, stayed


def test_a_main_thread_loads_what_jobs_threads_ask_for_one_engine_for_two(tmp_path):
    """A job thread never loads (an engine's processes die with the thread that forked
    them): it asks, the main thread loads; two asks for one model get one engine."""
    from core.run.pool import Loads

    engines, log = pool(available_gib=16)
    engines.loads = Loads(engines)
    a = model(tmp_path, "a")
    got: list[tuple[object, str]] = []

    def job() -> None:
        engine, _ = engines.get(a)
        got.append((engine, threading.current_thread().name))

    threads = [threading.Thread(target=job, name=f"job {n}") for n in (1, 2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while len(engines.loads.waiting()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got == [] and log == []  # asked, not loaded in their threads
    engines.loads.serve()  # the main thread
    for thread in threads:
        thread.join(10)
    assert log == ["load a"] and len(got) == 2 and got[0][0] is got[1][0]
    assert engines.users[a] == {t.ident for t in threads}  # each its user till it ends


def test_a_memory_budget_unloads_the_least_recently_used_first(tmp_path, monkeypatch):
    monkeypatch.setenv(BUDGET_ENV, "5120")  # MiB: two models of 2 GiB, not three
    assert budget_bytes() == 5 * GIB
    engines, log = pool(available_gib=64, max_engines=None, budget_gib=5)
    a, b, c = (model(tmp_path, n) for n in "abc")
    engines.get(a)
    engines.get(b)
    engines.get(a)  # a used last
    engines.get(c)
    assert log == ["load a", "load b", "unload b", "load c"]
    assert [cfg.model_name for cfg in engines.held] == ["a", "c"]
    monkeypatch.setenv(BUDGET_ENV, "lots")
    assert budget_bytes() is None  # not a number: no cap, and no crash


def test_a_memory_budget_set_in_settings_reaches_a_running_worker_at_its_next_load(
    tmp_path, monkeypatch
):
    """The worker reads the budget at each load (as it reads the idle time), so Settings
    changes it without a restart; the environment, where set, beats Settings."""
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    home = tmp_path / "home"
    assert budget_bytes(home) is None  # no cap by default
    engines, log = pool(available_gib=64, max_engines=None)
    engines.budget = lambda: budget_bytes(home)  # what the worker's main sets
    a, b, c = (model(tmp_path, n) for n in "abc")
    engines.get(a)
    engines.get(b)
    write_settings(home, EngineSettings(memory_mib=5120))  # while the worker runs
    assert budget_bytes(home) == 5 * GIB
    engines.get(c)  # two models of 2 GiB fit in 5 GiB, not three
    assert log == ["load a", "load b", "unload a", "load c"]
    write_settings(home, EngineSettings(memory_mib=0))
    assert budget_bytes(home) is None  # 0: no cap
    monkeypatch.setenv(BUDGET_ENV, "1024")
    write_settings(home, EngineSettings(memory_mib=5120))
    assert budget_bytes(home) == GIB  # the environment beats Settings


def test_engines_live_beside_each_other_only_with_engine_cores_in_child_processes(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(MULTIPROCESSING_ENV, "1")  # what the resident worker runs with
    assert max_engines() is None
    monkeypatch.setenv(MULTIPROCESSING_ENV, "0")  # in-process: vLLM holds one engine
    assert max_engines() == 1
    engines, log = pool(available_gib=64, max_engines=max_engines())
    engines.get(model(tmp_path, "a"))
    engines.get(model(tmp_path, "b"))
    assert log == ["load a", "unload a", "load b"]


def test_the_memory_in_use_counts_child_processes(tmp_path):
    before = tree_rss()
    child = subprocess.Popen(  # holds 300 MB, touched, as an engine core holds a model
        [sys.executable, "-c", "import sys,time; x=b'1'*300_000_000; print(1,flush=True); "
         "time.sleep(60)"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline()
        assert tree_rss() - before > 250_000_000
        # The Monitor's "Worker RSS" counts it too.
        assert ResourceSampler().sample()["rss_mib"] * 2**20 - before > 250_000_000
    finally:
        child.kill()
        child.wait()


def test_an_engine_child_process_dies_with_a_worker_killed_with_9(tmp_path):
    ready = tmp_path / "ready"
    child_code = (
        "from core.run.pool import die_with_parent; die_with_parent(); import pathlib, time; "
        f"pathlib.Path({str(ready)!r}).write_text('1'); time.sleep(120)"
    )
    parent_code = (
        "import os, subprocess, sys, time; "
        "os.environ['BATCH_STUDIO_PARENT_PID'] = str(os.getpid()); "
        f"subprocess.Popen([sys.executable, '-c', {child_code!r}]); time.sleep(120)"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the child did not start"
        (child,) = psutil.Process(parent.pid).children()
        parent.kill()  # SIGKILL: the parent runs nothing more
        parent.wait()
        _, alive = psutil.wait_procs([child], timeout=10)
        assert not alive, "the child outlived its parent"
    finally:
        parent.kill()
        for process in psutil.Process().children(recursive=True):
            process.kill()


def test_one_model_is_never_held_twice_with_other_settings(tmp_path):
    engines, log = pool(available_gib=16)
    a = model(tmp_path, "a")
    engines.get(a)
    engines.get(a.model_copy(update={"enable_chunked_prefill": False}))
    assert log == ["load a", "unload a", "load a"]


def test_a_failed_engine_is_dropped_and_the_next_job_loads_afresh(tmp_path):
    engines, log = pool(available_gib=16)
    a = model(tmp_path, "a")
    broken, _ = engines.get(a)
    engines.discard(broken)
    fresh, seconds = engines.get(a)
    assert fresh is not broken and seconds == 1.5
    assert log == ["load a", "unload a", "load a"]


def test_unload_by_name_and_close(tmp_path):
    engines, log = pool(available_gib=16)
    engines.get(model(tmp_path, "a"))
    engines.get(model(tmp_path, "b"))
    assert engines.unload_model("a") and not engines.unload_model("a")
    engines.close()
    assert log[-2:] == ["unload a", "unload b"] and not engines.held


def test_the_idle_time_comes_from_serve_then_settings_then_ten_minutes(tmp_path, monkeypatch):
    monkeypatch.delenv(IDLE_ENV, raising=False)
    assert idle_seconds(tmp_path) == 600
    write_settings(tmp_path, EngineSettings(idle_seconds=42))
    assert idle_seconds(tmp_path) == 42
    monkeypatch.setenv(IDLE_ENV, "7")
    assert idle_seconds(tmp_path) == 7
    monkeypatch.setenv(IDLE_ENV, "soon")  # not a number: the setting stands
    assert idle_seconds(tmp_path) == 42


def test_commands_are_taken_once_and_a_broken_one_is_dropped(tmp_path):
    send_command(tmp_path, EngineCommand(action="unload", model="a"))
    (tmp_path / "engine" / "commands" / "zz.json").write_text("{not json")
    send_command(tmp_path, EngineCommand(action="stop"))
    taken = take_commands(tmp_path)
    assert [c.action for c in taken] == ["unload", "stop"]
    assert take_commands(tmp_path) == []


@pytest.fixture
def resident(tmp_path, monkeypatch) -> Resident:
    (tmp_path / "jobs").mkdir()
    monkeypatch.setenv(IDLE_ENV, "0.5")
    return Resident(tmp_path / "jobs")


# The waits below tell which cause ended them by what they return and by bounds far from
# any machine's load (a tenth of an idle time of a minute), not by timing the wait.


def test_an_idle_worker_publishes_its_state_and_exits_no_sooner_than_the_idle_time(
    resident, tmp_path
):
    started = time.monotonic()
    assert resident.wait_for_work(lambda: False) is False
    assert time.monotonic() - started >= 0.5
    resident.close()
    assert read_state(tmp_path) is None  # gone with the worker


def test_an_idle_worker_is_woken_by_the_mark_of_a_job_queued_meanwhile(
    resident, tmp_path, monkeypatch
):
    monkeypatch.setenv(IDLE_ENV, "60")
    monkeypatch.setattr("core.run.resident.SCAN_SECONDS", 3600.0)  # only the mark can wake it
    queued = threading.Event()

    def submitted() -> None:  # what start_worker does for every submission
        queued.set()
        mark_queue_changed(tmp_path / "jobs")

    threading.Timer(0.2, submitted).start()
    assert resident.wait_for_work(queued.is_set) is True  # False: it idled out instead
    state = read_state(tmp_path)
    assert state is not None and state.pid == os.getpid() and state.state == "idle"
    resident.close()


def test_a_job_queued_without_the_mark_is_found_by_the_periodic_scan(
    resident, tmp_path, monkeypatch
):
    monkeypatch.setenv(IDLE_ENV, "60")
    queued = threading.Event()
    threading.Timer(0.2, queued.set).start()  # e.g. queued by another door
    assert resident.wait_for_work(queued.is_set) is True  # False: it idled out instead
    resident.close()


def test_a_stop_command_ends_an_idle_worker_before_its_idle_time(resident, tmp_path, monkeypatch):
    monkeypatch.setenv(IDLE_ENV, "60")
    threading.Timer(0.2, send_command, (tmp_path, EngineCommand(action="stop"))).start()
    started = time.monotonic()
    assert resident.wait_for_work(lambda: False) is False
    assert time.monotonic() - started < 6  # the command, not the minute's idle time
    resident.close()


def test_a_typed_text_is_refused_without_waiting_while_the_engine_runs_a_job(tmp_path):
    from core.jobs.engine_files import EngineBusy, EngineState, embed_on_engine, write_state

    now = time.time()
    write_state(
        tmp_path,
        EngineState(
            pid=os.getpid(), state="running", job_id="job_x", idle_seconds=600, updated_at=now
        ),
    )
    started = time.monotonic()
    with pytest.raises(EngineBusy, match="running job job_x; try again when it ends"):
        embed_on_engine(tmp_path, tmp_path / "model", ["a text"], timeout=60)
    assert time.monotonic() - started < 6  # refused, not timed out after its minute
    assert not list((tmp_path / "engine").glob("embed/*"))  # nothing left behind


def test_a_job_whose_status_is_final_no_longer_keeps_a_typed_text_waiting(tmp_path):
    """A job's thread indexes its answers after its final status: ``state.json`` lists it
    a moment longer, and a text typed then is not refused for it."""
    from core.jobs.engine_files import EngineState, running_jobs, write_state
    from core.jobs.folder import JobFolder
    from core.schemas import JobStatus

    (tmp_path / "jobs" / "job_done").mkdir(parents=True)
    done = JobStatus()
    done.enter("completed", "3 succeeded")
    JobFolder(tmp_path / "jobs" / "job_done").write_status(done)
    listed = ["job_done", "job_x"]
    state = EngineState(
        pid=os.getpid(), state="running", job_id=listed[0], job_ids=listed,
        idle_seconds=600, updated_at=time.time(),
    )  # fmt: skip
    write_state(tmp_path, state)
    assert running_jobs(tmp_path) == ["job_x"]  # job_x has no final status: it runs
    write_state(tmp_path, state.model_copy(update={"job_ids": ["job_done"]}))
    assert running_jobs(tmp_path) == []


def test_each_job_a_resident_worker_runs_keeps_its_own_log(resident, tmp_path):
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    for log_file, job in ((first, "job a"), (second, "job b")):
        with resident.output_to(log_file):
            # The worker's stdout and stderr descriptors (vLLM's and the log's output).
            os.write(1, f"running {job}\n".encode())
            os.write(2, f"engine says {job}\n".encode())
    assert first.read_text() == "running job a\nengine says job a\n"
    assert second.read_text() == "running job b\nengine says job b\n"


def test_serve_engine_idle_reaches_the_workers_the_app_starts(monkeypatch):
    from core.cli.main import main

    monkeypatch.delenv(IDLE_ENV, raising=False)
    started: list[list[str]] = []
    monkeypatch.setattr(os, "execv", lambda path, argv: started.append(argv))
    monkeypatch.chdir(os.getcwd())  # serve moves to the checkout; the test comes back
    assert main(["serve", "--engine-idle", "90"]) == 0
    assert os.environ[IDLE_ENV] == "90.0" and "streamlit" in started[0]
    assert main(["serve", "--engine-idle", "-1"]) == 2  # refused, nothing started
    assert len(started) == 1


def test_a_model_loaded_where_another_was_freed_counts_what_the_process_holds(tmp_path):
    log: list[str] = []
    memory = {"used": 1 * GIB}  # the process before any model

    def load(config: EngineConfig) -> Loaded:
        if config.model_name == "a":
            memory["used"] += 3 * GIB
        # b reuses the memory a freed (the allocator keeps it): the process grows by little.
        return Loaded(config, log)

    engines = EnginePool(load, lambda: memory["used"], lambda: 64 * GIB, lambda: 1)
    engines.get(model(tmp_path, "a"))
    engines.get(model(tmp_path, "b"))
    assert log == ["load a", "unload a", "load b"]
    assert engines.held[model(tmp_path, "b")].memory_bytes == 3 * GIB


def chat_file(path: Path) -> Path:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body}
    path.write_text(json.dumps(line) + "\n")
    return path


def test_a_submission_starts_no_second_worker_while_a_worker_holds_the_engine(
    studio_home, model, tmp_path
):
    jobs = studio_home / "jobs"
    jobs.mkdir(parents=True)
    holder = EngineLock(jobs)  # this test is the resident worker
    assert holder.acquire()
    try:
        started = submit(
            chat_file(tmp_path / "a.jsonl"), Submission(EngineConfig(model=str(model)))
        )
    finally:
        holder.release()
    # No process importing vLLM beside the busy engine: the holder runs the job next.
    assert started.worker is None
    assert started.job.read_status().state == "queued"
    assert queue_changed_at(jobs) > 0  # an idle holder looks at the queue at once


def test_engine_unload_and_stop_from_a_shell_say_what_stays_loaded_and_for_which_job(
    studio_home, monkeypatch
):
    """Issue 41: the CLI prints the worker's answer; a model a running job uses stays, named
    with the job, and a stop says which jobs it lets finish first."""
    from core.run.pool import POOL
    from tests.support.cli import cli
    from tests.support.jobs import stand_in_pool

    engines = stand_in_pool(monkeypatch)
    POOL.get(EngineConfig(model=str(studio_home / "busy")), user="job thread")
    POOL.get(EngineConfig(model=str(studio_home / "idle")))
    (studio_home / "jobs").mkdir(parents=True)
    resident = Resident(studio_home / "jobs")
    resident.job_of = lambda: {"job thread": "job_a"}
    resident.publish(["job_a"])
    done = threading.Event()

    def worker() -> None:  # the worker's main thread, beside its running job
        while not done.is_set():
            resident.commands()
            time.sleep(0.02)

    threading.Thread(target=worker, daemon=True).start()
    try:
        assert "busy (chat)" in (shown := cli("engine", "status").stdout)
        assert "in use by job_a" in shown
        assert cli("engine", "unload", "busy").stdout.splitlines() == [
            "busy stays loaded: running job job_a uses it"
        ]
        assert cli("engine", "unload").stdout.splitlines() == [
            "unloaded idle",
            "busy stays loaded: running job job_a uses it",
        ]
        assert engines["idle"].closed and not engines["busy"].closed
        stopped = cli("engine", "stop")
        assert stopped.returncode == 0
        assert stopped.stdout.splitlines()[0] == (
            f"worker {os.getpid()} is stopping after 1 running job: job_a; it starts no new "
            "job, then unloads every model and exits"
        )
        assert resident.stopping and not engines["busy"].closed  # the job runs on
    finally:
        done.set()
        resident.close()
