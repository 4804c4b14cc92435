"""The engines a worker keeps loaded between jobs, least recently used first out.

A job on a loaded model gets its engine at once. A job on another model loads it beside
the loaded ones when memory allows, else the least recently used engines are unloaded
first. Memory is judged from what the machine reports: available RAM (psutil) on a CPU,
free GPU memory (NVML) on a GPU, against what this model took when it was last loaded in
this process (the growth of this process's and its children's RSS, or of GPU memory), or
before its first load its weights and KV cache (plus its processes' own, on a CPU).
``BATCH_STUDIO_ENGINE_MEMORY`` (MiB) or Settings caps what the loaded engines may hold
together (:func:`core.jobs.engine_files.memory_budget_mib`, read at each load).

Several engines live in one worker only with vLLM's V1 multiprocessing on (each ``LLM``'s
engine core in a child process of its own): in-process, vLLM 0.32 keeps one parallel state
per process, and a second ``LLM`` breaks the first ("pipeline model parallel group is not
initialized", measured 2026-12-02). A worker with an idle time turns it on
(:func:`core.run.worker.main`; one with none exits after its queue and keeps the shorter
in-process cold start); where it is off (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as
the CPU default of :func:`core.run.engine.configure_cpu_environment` elsewhere) one engine
is kept at a time. Its cost, measured with ``bench/engines.py`` on the 2-core CPU under
a quiet machine (docs/benchmarks.md): no loss of tokens/s (1.01x the in-process tokens/s,
the same answers), a slower load (22 s against 13 s: the core's process imports torch and
vLLM again), and about 1 GiB more memory (``PROCESS_BYTES``).

Jobs running side by side (:mod:`core.run.running`) share the pool: an engine a running
job uses (its ``users``) is never unloaded to make room, so a job whose model does not fit
beside them waits (:meth:`EnginePool.can_load`). Every load happens in the worker's main
thread: an engine's child processes die with the *thread* that forked them (Linux ties
``PR_SET_PDEATHSIG`` to it; tried: an engine loaded from a job's thread died with it), so a
job's thread asks the main thread for its engine (:class:`Loads`), and two jobs that ask for
the same model get one engine. A job whose engine is not loading yet says why in its status
(:func:`waits_said_by`): another job's model loads (one load at a time), or memory (which
models, used by which jobs).

An engine's child processes must not outlive a worker killed with -9 (vLLM leaves them
running, holding the model: tried): :func:`die_with_parent` makes each die with its parent.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from core.jobs.engine_files import memory_budget_mib
from core.schemas import EngineConfig

log = logging.getLogger(__name__)

MULTIPROCESSING_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
PARENT_ENV = "BATCH_STUDIO_PARENT_PID"  # the process a child must die with
RESERVE_BYTES = 1 << 30  # left to the rest of the machine when judging a new load
# A CPU engine core, which runs its model in its own process (core.run.engine), imports
# torch and vLLM: about 1 GiB beyond the weights and KV cache (SmolLM2-135M, 2026-12-07).
PROCESS_BYTES = 1 << 30
PR_SET_PDEATHSIG = 1  # prctl option: the signal a process gets when its parent dies
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


class Closable(Protocol):
    load_seconds: float

    def close(self) -> None: ...


@dataclass
class Held:
    """One loaded engine and what it costs."""

    engine: Closable
    memory_bytes: int
    loaded_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.time)


def _gpu_memory() -> tuple[int, int, int] | None:
    """``(used, free, total)`` bytes over every GPU (NVML), or None without a GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        infos = [
            pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i))
            for i in range(count)
        ]
    except Exception:  # no driver or no library
        return None
    if not infos:
        return None
    return sum(i.used for i in infos), sum(i.free for i in infos), sum(i.total for i in infos)


def multiprocessing_on() -> bool:
    """Whether each engine's core runs in a child process (vLLM's default; the CPU setup
    turns it off outside the resident worker)."""
    return os.environ.get(MULTIPROCESSING_ENV, "1") != "0"


def max_engines() -> int | None:
    """How many engines one process may hold: any number (memory decides) with engine
    cores in child processes, else one."""
    return None if multiprocessing_on() else 1


def tree_rss(process: psutil.Process | None = None) -> int:
    """The RSS of a process and all its descendants (an engine core is a child process):
    what it holds in RAM."""
    process = process or psutil.Process()
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # ended meanwhile
            total += child.memory_info().rss
    return total


def memory_in_use() -> int:
    """What this worker holds: GPU memory in use where there is a GPU, else the RSS of this
    process and its children."""
    gpu = _gpu_memory()
    return gpu[0] if gpu is not None else tree_rss()


def budget_bytes(home: Path | None = None) -> int | None:
    """The memory budget of a worker serving ``home`` in bytes (None: no cap beyond what
    the machine has): ``BATCH_STUDIO_ENGINE_MEMORY``, else its Settings."""
    mib = memory_budget_mib(home)
    return None if mib is None else int(mib * 2**20)


def die_with_parent() -> None:
    """Makes this process die when its parent does (Linux ``PR_SET_PDEATHSIG``), and its own
    children die with it. Runs in an engine's child processes (see
    :mod:`core.run.worker`): vLLM leaves them running when a worker is killed with -9."""
    expected = int(os.environ.get(PARENT_ENV, os.getppid()))
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to ask the kernel
        return
    if os.getppid() != expected:  # the parent died before the signal was asked for
        os._exit(1)
    os.environ[PARENT_ENV] = str(os.getpid())  # what this process's children check


def memory_available() -> int:
    """Free GPU memory where there is a GPU, else the RAM the machine can still give."""
    gpu = _gpu_memory()
    return gpu[1] if gpu is not None else psutil.virtual_memory().available


def first_load_bytes(config: EngineConfig) -> int:
    """What a model never loaded in this process will take: on a GPU its share of the GPU
    (vLLM takes ``gpu_memory_utilization`` of it whatever the model), on a CPU its weight
    files and its fixed KV cache."""
    gpu = _gpu_memory()
    if gpu is not None:
        return int(config.gpu_memory_utilization * gpu[2])
    processes = PROCESS_BYTES if multiprocessing_on() else 0
    folder = Path(config.model)
    weights = sum(
        f.stat().st_size for f in folder.glob("*") if f.suffix in WEIGHT_SUFFIXES and f.is_file()
    )
    return weights + int(config.cpu_kv_cache_gib * (1 << 30)) + processes


class EnginePool:
    """Loaded engines by their config, least recently used first."""

    def __init__(
        self,
        load: Callable[[EngineConfig], Closable],
        in_use: Callable[[], int] = memory_in_use,
        available: Callable[[], int] = memory_available,
        limit: Callable[[], int | None] = max_engines,
        budget: Callable[[], int | None] = budget_bytes,
    ) -> None:
        self._load = load
        self._in_use = in_use
        self._available = available
        self._limit = limit
        self.budget = budget  # read at each load: Settings may change it
        self.held: dict[EngineConfig, Held] = {}  # insertion order = least recently used first
        self.measured: dict[str, int] = {}  # model folder -> bytes its last load took
        self.on_change: Callable[[], None] | None = None  # told after a load or unload
        self.baseline: int | None = None  # memory in use before this process's first load
        self.users: dict[EngineConfig, set[Hashable]] = {}  # the running jobs on each engine
        self.loads: Loads | None = None  # jobs side by side: where their threads ask

    def get(self, config: EngineConfig, user: Hashable | None = None) -> tuple[Closable, float]:
        """The engine for ``config`` and the seconds spent loading it (0 when loaded).
        ``user`` (a running job) holds it until :meth:`release`. Outside the main thread
        while jobs run side by side, the main thread loads it (:class:`Loads`)."""
        if self.loads is not None and threading.current_thread() is not threading.main_thread():
            return self.loads.ask(config)
        engine, seconds = self._get(config)
        if user is not None:
            self.users.setdefault(config, set()).add(user)
        return engine, seconds

    def _get(self, config: EngineConfig) -> tuple[Closable, float]:
        if config in self.held:
            held = self.held.pop(config)
            held.last_used = time.time()
            self.held[config] = held  # now the most recently used
            return held.engine, 0.0
        for other in [c for c in self.held if c.model == config.model and not self.in_use(c)]:
            self.unload(other)  # the same model with other settings: one copy at a time
        need = self.measured.get(config.model) or first_load_bytes(config)
        while not self._room_for(need):
            idle = [c for c in self.held if not self.in_use(c)]  # least recently used first
            if not idle:
                break  # can_load let it in beside the engines in use
            self.unload(idle[0])
        before = self._in_use()
        if self.baseline is None:
            self.baseline = before
        engine = self._load(config)
        after = self._in_use()
        took = max(after - before, 0)
        if not self.held:
            # Alone, it holds all this process took beyond what it held before its first
            # load: the growth alone under-counts a model loaded where another's memory was
            # freed (the allocator reuses it; measured: 5 MiB after a swap for 90 MB of
            # weights).
            took = max(took, after - self.baseline)
        self.measured[config.model] = took
        self.held[config] = Held(engine, took)
        self._changed()
        return engine, engine.load_seconds

    def _room_for(self, need: int, kept: list[EngineConfig] | None = None) -> bool:
        """Whether an engine that takes ``need`` bytes fits beside those held (or beside
        ``kept`` alone, the others' memory counted as freed)."""
        kept = list(self.held) if kept is None else kept
        freed = sum(h.memory_bytes for c, h in self.held.items() if c not in kept)
        limit, budget = self._limit(), self.budget()
        if limit is not None and len(kept) >= limit:
            return False
        if budget is not None and sum(self.held[c].memory_bytes for c in kept) + need > budget:
            return False
        return self._available() + freed - RESERVE_BYTES >= need

    def in_use(self, config: EngineConfig) -> bool:
        return bool(self.users.get(config))

    def release(self, user: Hashable) -> None:
        """A job has ended: the engines it used may be unloaded again."""
        for users in self.users.values():
            users.discard(user)

    def memory_wait(self, config: EngineConfig, job_of: dict[Hashable, str]) -> str:
        """Why ``config`` cannot load beside the engines running jobs use (when
        :meth:`can_load` says no): ``for memory: NAME needs ~N GiB beside the loaded A, B
        (used by running jobs X, Y)``; ``job_of`` names each user."""
        busy = [c for c in self.held if self.in_use(c)]
        need = self.measured.get(config.model) or first_load_bytes(config)
        models = ", ".join(dict.fromkeys(c.model_name for c in busy)) or "none"
        # A copy: a job's thread releases its engines as it asks for its next one.
        users = sorted({job_of.get(u, f"thread {u}") for c in busy for u in list(self.users[c])})
        used = f" (used by running {'job' if len(users) == 1 else 'jobs'} {', '.join(users)})"
        return (
            f"for memory: {config.model_name} needs ~{need / 2**30:.1f} GiB beside the loaded "
            f"{models}{used if users else ''}"
        )

    def can_load(self, config: EngineConfig) -> bool:
        """Whether :meth:`get` can give this engine now without unloading one a running job
        uses: it is loaded, or nothing is in use (as for a job alone: the least recently
        used make room), or it fits beside the engines in use."""
        if config in self.held:
            return True
        busy = [c for c in self.held if self.in_use(c)]
        if not busy:
            return True
        if any(c.model == config.model for c in busy):
            return False  # the same model with other settings: one copy at a time
        need = self.measured.get(config.model) or first_load_bytes(config)
        return self._room_for(need, kept=busy)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def unload(self, config: EngineConfig) -> None:
        held = self.held.pop(config, None)
        if held is not None:
            log.info("unloading %s", config.model_name)
            held.engine.close()
            self._changed()

    def unload_model(self, name: str) -> bool:
        """Unloads every engine of the model called ``name`` (its folder or folder name);
        False when none is loaded."""
        found = [c for c in self.held if name in (c.model, c.model_name)]
        for config in found:
            self.unload(config)
        return bool(found)

    def discard(self, engine: object) -> None:
        """Forgets an engine that failed (it may be broken): the next job loads afresh."""
        for config, held in list(self.held.items()):
            if held.engine is engine:
                self.held.pop(config)
                self._changed()
                try:
                    engine.close()  # type: ignore[attr-defined]
                except Exception:  # already broken; its memory goes with the process at worst
                    log.exception("closing a failed engine")

    def close(self) -> None:
        for config in list(self.held):
            self.unload(config)


_speaker = threading.local()  # a job's thread: how its status says why its engine waits
_UNSAID = "\0"  # an ask's status not yet told anything by the main thread


@contextlib.contextmanager
def waits_said_by(say: Callable[[str | None], None]) -> Iterator[None]:
    """While a job's thread asks for engines (:meth:`EnginePool.get` while jobs run side
    by side), ``say(why)`` tells its status why its engine is not loading yet, and
    ``say(None)`` that it loads now (the job words that: :func:`loading_said`). Called
    from the worker's main thread too."""
    _speaker.say = say
    try:
        yield
    finally:
        _speaker.say = None


def loading_said(name: str, last_seconds: float | None) -> str:
    """What a job's status says while its model loads: ``loading NAME (last load took
    14 s)``, the time of the model's last load on this machine when one was measured."""
    if not last_seconds:
        return f"loading {name}"
    minutes, seconds = divmod(round(last_seconds), 60)
    took = f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
    return f"loading {name} (last load took {took})"


class _Ask:
    """One job thread's ask for an engine, answered by the main thread."""

    def __init__(self, config: EngineConfig) -> None:
        self.config, self.user = config, threading.get_ident()
        self.done = threading.Event()
        self.result: tuple[Closable, float] | None = None
        self.error: BaseException | None = None
        self.say: Callable[[str | None], None] | None = getattr(_speaker, "say", None)
        self.said: str | None = _UNSAID

    def answer(self, result: tuple[Closable, float] | None, error: BaseException | None) -> None:
        self.result, self.error = result, error
        self.done.set()

    def tell(self, why: str | None) -> None:
        """Says why it waits (None: its load begins), once for each change."""
        if self.say is None or why == self.said:
            return
        self.said = why
        try:
            self.say(why)
        except Exception:  # a status not written is no reason to fail a load
            log.exception("telling a job why its engine waits")


class Loads:
    """The engines jobs' threads ask for, loaded by the worker's main thread when it calls
    :meth:`serve` (see the module doc); a job's thread is its ``user`` of the engine until
    the pool's :meth:`EnginePool.release` of it. An ask that does not fit beside the engines
    in use waits for them. Each ask that waits is told why (:func:`waits_said_by`), as it
    begins waiting and whenever the reason changes; ``job_of`` names the jobs by their
    threads."""

    def __init__(self, pool: EnginePool) -> None:
        self.pool = pool
        self.job_of: Callable[[], dict[Hashable, str]] = dict
        self._asked: list[_Ask] = []
        self._lock = threading.Lock()  # also orders what each ask is told
        self.loading: tuple[str, str] | None = None  # the model loading now, for which job

    def ask(self, config: EngineConfig) -> tuple[Closable, float]:
        """From a job's thread: waits for the main thread to give the engine. A job runs
        its models in turn: the engine of its last one is free for others from now on (two
        jobs of two models each would otherwise wait for each other's)."""
        self.pool.release(threading.get_ident())
        ask = _Ask(config)
        with self._lock:
            self._asked.append(ask)
            if self.loading is not None:  # the main thread is busy loading: it cannot say so
                ask.tell(self._behind(ask, *self.loading))
        ask.done.wait()
        if ask.error is not None:
            raise ask.error
        assert ask.result is not None
        return ask.result

    @staticmethod
    def _behind(ask: _Ask, model: str, job: str) -> str:
        """Why ``ask`` waits while ``model`` loads for ``job``."""
        if model == ask.config.model_name:
            return f"waiting for {model} to finish loading for job {job}"
        return (
            f"waiting for {model} to finish loading for job {job}, then loading "
            f"{ask.config.model_name} (models load one at a time)"
        )

    def waiting(self) -> dict[int, EngineConfig]:
        """The engines asked for and not yet given, by the thread that waits."""
        with self._lock:
            return {a.user: a.config for a in self._asked}

    def serve(self) -> None:
        """In the main thread: loads (or hands over) each engine asked for that can be had
        now, in the order asked; tells each of the others why it waits. An ask stays
        among those waiting until answered: a SIGTERM that ends a load (while
        :attr:`loading`, :meth:`core.run.running.Running.on_signal`) leaves it for the
        worker to withdraw once it has asked every job to stop."""
        with self._lock:
            asked = list(self._asked)
        job_of = self.job_of()
        for ask in asked:
            if not self.pool.can_load(ask.config):
                why = "waiting " + self.pool.memory_wait(ask.config, job_of)
                with self._lock:
                    ask.tell(f"{why}; it loads when one of them ends")
                continue
            with self._lock:
                if ask.config not in self.pool.held:  # a load, not a hand-over: say who waits
                    ask.tell(None)
                    loading = (ask.config.model_name, job_of.get(ask.user, f"thread {ask.user}"))
                    for other in self._asked:
                        if other is not ask:
                            other.tell(self._behind(other, *loading))
                    self.loading = loading  # last: a SIGTERM from here on ends the load
            try:
                got = self.pool.get(ask.config, user=ask.user)
            except Exception as exc:  # the job fails with it (a model that cannot load)
                self._answer(ask, None, exc)
            else:
                self._answer(ask, got, None)
            finally:  # a signal that ended the load leaves the ask for the worker to withdraw
                self.loading = None

    def _answer(
        self, ask: _Ask, result: tuple[Closable, float] | None, error: BaseException | None
    ) -> None:
        with self._lock:
            self._asked.remove(ask)
        ask.answer(result, error)

    def withdraw(self, user: int, error: BaseException) -> None:
        """Ends a thread's wait with ``error`` (its job was cancelled, the worker stops)."""
        with self._lock:
            mine = [a for a in self._asked if a.user == user]
            self._asked = [a for a in self._asked if a.user != user]
        for ask in mine:
            ask.answer(None, error)


def _load_engine(config: EngineConfig) -> Closable:
    from core.run.engine import Engine

    return Engine(config)


POOL = EnginePool(_load_engine)  # this worker process's engines
