"""A CPU engine's threads, kept to the cores other processes leave it.

An engine's step splits its work evenly over its OpenMP threads and waits for the last of
them. Beside another busy process, the thread that shares a core finishes last, at every
step, so two threads on two cores with one of them taken run no faster than one thread,
and lose the time the scheduler takes to share. vLLM's own defaults leave a core to its
front end and run one thread; the studio runs on every core while the machine is quiet
and, between steps, drops the threads a neighbour takes (and takes them back when it
stops). The engine's thread count is changed in the thread that runs the model: through
vLLM's ``collective_rpc`` and :class:`ThreadControl`, a method vLLM adds to its CPU worker.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable

import psutil

# How often the load is read. A reading is two /proc reads; a change costs one RPC.
CHECK_SECONDS = 2.0
# A core counts as taken when other processes use more than half of it...
TAKEN = 0.5
# ...but the engine gives a thread up only past three quarters of a core, and takes it back
# only below a quarter: a neighbour near the half (a test's or a page's polling) would
# otherwise flip the threads at every check, and the engine's pace with them.
GIVE_UP_AT = 0.75
TAKE_BACK_BELOW = 0.25

log = logging.getLogger(__name__)

WORKER_EXTENSION = f"{__name__}.ThreadControl"


class ThreadControl:
    """Mixed into vLLM's CPU worker (``worker_extension_cls``): sets the model's threads."""

    def process_id(self) -> int:
        return os.getpid()

    def set_cpu_threads(self, threads: int) -> int:
        import torch

        # vLLM replaces torch.set_num_threads with a no-op once it binds threads; the
        # binding is off here (nobind), and the C function is what it would call.
        torch._C.set_num_threads(threads)
        return torch.get_num_threads()


def _busy_seconds(cores: set[int]) -> float:
    """CPU seconds spent busy on ``cores`` since boot (steal counted: a core the host took)."""
    readings = psutil.cpu_times(percpu=True)
    return sum(
        t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)
        for core, t in enumerate(readings)
        if core in cores
    )


def _own_seconds(processes: list[psutil.Process]) -> float:
    """CPU seconds the engine's processes (its front end and its workers) have used."""
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:  # an engine core that has just ended
            continue
        total += times.user + times.system
    return total


def threads_for(cores: int, others: float, taken_from: float = TAKEN) -> int:
    """The threads to run on ``cores`` beside ``others`` cores' worth of other work, a core
    counting as taken past ``taken_from`` of it."""
    taken = int(others + 1 - taken_from)
    return max(1, cores - taken)


def engine_processes(workers: Iterable[int]) -> list[psutil.Process]:
    """This process, the engine's workers and the processes between (an engine core that
    started its worker in a process of its own)."""
    me = psutil.Process()
    found = {me.pid: me}
    for pid in workers:
        process: psutil.Process | None = psutil.Process(pid)
        while process is not None and process.pid not in found:
            found[process.pid] = process
            process = process.parent()
    return list(found.values())


class CpuThreads:
    """Reads, between engine steps, how much of the machine other processes take, and
    sets the engine's threads to the rest (see the module's docstring).

    Args:
        apply: sets the engine's thread count.
        threads: the count the engine started with (its ``OMP_NUM_THREADS``): never
            exceeded, since a user who set it meant it as a cap.
        workers: the process ids of the engine's workers (its engine core's, when it runs
            in a child process); their work and this process's are the engine's own.
    """

    def __init__(
        self, apply: Callable[[int], object], threads: int, workers: Iterable[int]
    ) -> None:
        self._apply = apply
        self.cores = os.sched_getaffinity(0)
        self.threads = self.ceiling = threads
        self._processes = engine_processes(workers)
        self._last: tuple[float, float, float] | None = None

    def _reading(self) -> tuple[float, float, float]:
        return time.monotonic(), _busy_seconds(self.cores), _own_seconds(self._processes)

    def check(self) -> None:
        """Sets the threads if ``CHECK_SECONDS`` have passed and the neighbours changed."""
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < CHECK_SECONDS:
            return
        reading = self._reading()
        last, self._last = self._last, reading
        if last is None:
            return
        wall = reading[0] - last[0]
        others = max(0.0, (reading[1] - last[1]) - (reading[2] - last[2])) / wall
        fewer = min(self.ceiling, threads_for(len(self.cores), others, GIVE_UP_AT))
        more = min(self.ceiling, threads_for(len(self.cores), others, TAKE_BACK_BELOW))
        wanted = fewer if fewer < self.threads else max(more, self.threads)
        if wanted != self.threads:
            log.info(
                "CPU threads %d -> %d: other processes use %.1f of %d cores",
                self.threads,
                wanted,
                others,
                len(self.cores),
            )
            self._apply(wanted)
            self.threads = wanted

    def restart(self) -> None:
        """Forgets the last reading: the engine was idle since, and its own use with it."""
        self._last = None
