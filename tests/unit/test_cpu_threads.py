"""A CPU engine gives up the threads a neighbour takes, and takes them back when it stops."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from core.run import cpu_threads
from core.run.cpu_threads import CHECK_SECONDS, CpuThreads, ThreadControl, threads_for


@pytest.mark.parametrize(
    ("cores", "others", "threads"),
    [
        (2, 0.0, 2),  # quiet: a thread per core
        (2, 0.4, 2),  # a light neighbour (a UI refresh) takes no core
        (2, 0.6, 1),  # most of a core taken: that core's thread would finish every step last
        (2, 1.9, 1),  # never fewer than one thread
        (4, 1.0, 3),
        (4, 2.6, 1),
        (1, 3.0, 1),
    ],
)
def test_threads_are_the_cores_others_leave(cores: int, others: float, threads: int) -> None:
    assert threads_for(cores, others) == threads


class FakeMachine:
    """Readings a test sets: wall time, busy CPU seconds, the engine's own CPU seconds."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = self.busy = self.own = 0.0
        monkeypatch.setattr(cpu_threads.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(cpu_threads, "_busy_seconds", lambda cores: self.busy)
        monkeypatch.setattr(cpu_threads, "_own_seconds", lambda processes: self.own)

    def run(self, seconds: float, engine: float, others: float) -> None:
        """``seconds`` pass with the engine using ``engine`` cores and others ``others``."""
        self.now += seconds
        self.own += engine * seconds
        self.busy += (engine + others) * seconds


def two_cores(
    monkeypatch: pytest.MonkeyPatch, threads: int = 2
) -> tuple[CpuThreads, list[int], FakeMachine]:
    machine = FakeMachine(monkeypatch)
    monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: {0, 1})
    applied: list[int] = []
    return CpuThreads(applied.append, threads, []), applied, machine


def test_drops_a_thread_while_a_neighbour_spins_and_takes_it_back(monkeypatch) -> None:
    threads, applied, machine = two_cores(monkeypatch)
    threads.check()  # the first reading: nothing to compare with yet
    machine.run(CHECK_SECONDS, engine=2.0, others=0.0)
    threads.check()
    assert applied == []  # the engine's own use of both cores is not a neighbour

    machine.run(CHECK_SECONDS, engine=1.0, others=1.0)
    threads.check()
    assert applied == [1] and threads.threads == 1

    machine.run(CHECK_SECONDS, engine=1.0, others=1.0)
    threads.check()
    assert applied == [1]  # no call while nothing changes

    machine.run(CHECK_SECONDS, engine=1.0, others=0.0)
    threads.check()
    assert applied == [1, 2] and threads.threads == 2


def test_never_more_threads_than_it_started_with(monkeypatch) -> None:
    """OMP_NUM_THREADS=1 on two cores (as the tests' xdist workers set it): a cap, kept."""
    threads, applied, machine = two_cores(monkeypatch, threads=1)
    threads.check()
    machine.run(CHECK_SECONDS, engine=1.0, others=0.0)
    threads.check()
    assert applied == [] and threads.threads == 1


def test_reads_no_more_often_than_every_check_seconds(monkeypatch) -> None:
    threads, applied, machine = two_cores(monkeypatch)
    threads.check()
    machine.run(CHECK_SECONDS / 4, engine=1.0, others=1.0)
    threads.check()
    assert applied == []
    machine.run(CHECK_SECONDS, engine=1.0, others=1.0)
    threads.check()
    assert applied == [1]


def test_restart_forgets_the_idle_time(monkeypatch) -> None:
    """Between runs the engine idles: an idle engine's share is no neighbour's."""
    threads, applied, machine = two_cores(monkeypatch)
    threads.check()
    machine.run(600, engine=0.0, others=1.9)  # a neighbour ran while the engine had no work
    threads.restart()
    threads.check()
    machine.run(CHECK_SECONDS, engine=2.0, others=0.0)
    threads.check()
    assert applied == []


def test_a_real_spinning_neighbour_takes_a_core() -> None:
    """Read from /proc: a process spinning beside this one is counted as another's core."""
    applied: list[int] = []
    cores = len(os.sched_getaffinity(0))
    threads = CpuThreads(applied.append, cores, [])
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # started
        threads.check()
        time.sleep(CHECK_SECONDS + 0.5)
        threads.check()
    finally:
        spinner.kill()
        spinner.wait()
    assert applied and applied[-1] <= max(1, cores - 1)


def test_the_engine_is_this_process_its_workers_and_those_between() -> None:
    """An engine core in a child process starts its worker in a grandchild: all three are
    the engine's own, not a neighbour."""
    middle = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(p.pid, flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        worker = int(middle.stdout.readline())
        pids = {p.pid for p in cpu_threads.engine_processes([worker])}
    finally:
        subprocess.run(["pkill", "-P", str(middle.pid)], check=False)
        middle.kill()
        middle.wait()
    assert pids == {os.getpid(), middle.pid, worker}


def test_thread_control_sets_the_threads_torch_runs() -> None:
    import torch

    before = torch.get_num_threads()
    try:
        assert ThreadControl().set_cpu_threads(1) == 1
        assert torch.get_num_threads() == 1
    finally:
        torch._C.set_num_threads(before)


def test_a_neighbour_near_half_a_core_does_not_flip_the_threads(monkeypatch) -> None:
    """A poller at 0.4-0.6 of a core (seen flipping 2 -> 1 -> 2 every few seconds, the
    engine's pace with it): the threads stay until a core is clearly taken or freed."""
    threads, applied, machine = two_cores(monkeypatch)
    threads.check()
    for others in (0.55, 0.45, 0.6, 0.4):
        machine.run(CHECK_SECONDS, engine=1.5, others=others)
        threads.check()
    assert applied == []
    machine.run(CHECK_SECONDS, engine=1.0, others=0.9)
    threads.check()
    assert applied == [1]
    for others in (0.4, 0.3, 0.5):
        machine.run(CHECK_SECONDS, engine=1.0, others=others)
        threads.check()
    assert applied == [1]
    machine.run(CHECK_SECONDS, engine=1.0, others=0.1)
    threads.check()
    assert applied == [1, 2]
