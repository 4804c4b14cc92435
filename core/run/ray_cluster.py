"""Runs a job's requests on a Ray cluster, through Ray Data, with the local engine's code.

The worker still owns the job folder; this executor only changes where requests run. The
pending requests become a Ray Dataset of shards (one row per shard, the requests as JSON);
``map_batches`` hands each shard to a replica, an actor of an actor pool that builds
:class:`core.run.engine.Engine` once and runs the shard with :func:`core.run.retry.run_chunk`:
the same engine functions and retry policy as the local executor, so request mapping and
output lines are identical. Each output line gets one extra top-level field, ``node_id``
(the Ray node that produced it), so provenance shows where every result came from.

Exactly once: results stream back with ``iter_rows`` as shards finish and are yielded to
the worker, which writes them. A replica that dies is restarted by Ray Data (twice at
most) and its shards run again; if the dataset still fails, the requests without a line
run again in a new dataset (three passes at most), and any still without one end as a
retryable ``engine_error``. A line for a request that already has one is dropped.

Run windows: a job with windows runs a :class:`Door`, an actor on the driver's node that a
thread of the driver closes as soon as the job's gate refuses (:class:`WindowWatch`, asked
every ``GATE_POLL_SECONDS``). Each replica asks the door before it starts a shard and hands
back a shard it did not start as ``held``: when the window closes, each replica finishes
the shard it runs (at most ``SHARD_REQUESTS`` requests, or the job's chunk size), the
others run nothing, the pass ends, and the requests left wait for the job's next run, as
on this machine, where the gate is asked before each request enters the engine. One
dataset per pass still feeds every shard, so the replicas load their model once a run.

``spec.ray`` (see :class:`core.schemas.RaySettings`)::

    {"address": "local" | "auto" | "HOST:6379",
     "replicas": 2, "gpus_per_replica": 0, "cpus_per_replica": 1,
     "resources": {"slot": 1}}

``gpus_per_replica`` is also each replica's tensor parallel size. On CPU nodes each replica
runs vLLM in-process and eager (the settings of ``core.run.engine``) with as many OpenMP
threads as it has CPUs. Progress per node and replica, the cluster's resources and the
dashboard link go to ``ray.json`` in the job folder, which Monitor shows.

A job whose input is an object (``s3://...``) sends the replicas where their lines are,
not the requests: they read them from the store themselves (:mod:`core.run.ray_input`),
with the ``AWS_*`` variables of the driver in their runtime env. A job whose output is an
object has the replicas write their results to parts there and send back only where they
are (:mod:`core.run.ray_output`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from core.check.engine_requests import KINDS, EngineRequest
from core.jobs.folder import JobFolder
from core.run import ray_output
from core.run.engine import EngineLoadError, cpu_thread_settings
from core.run.outputs import error_line
from core.run.pending import Requests
from core.run.ray_input import ObjectShard, input_spans, read_requests, replicas_read_input
from core.run.ray_stats import RayStats
from core.schemas import EngineConfig, JobDefaults, JobSpec, RaySettings
from core.storage.s3 import StorageError, stat

log = logging.getLogger(__name__)
MAX_PASSES = 3  # datasets run for one job before requests still without a line fail
REPLICA_RESTARTS = 2  # per replica, by Ray, before its dataset fails
REPLICA_START_SECONDS = 900  # to schedule and load every replica (an 8B model: minutes)
# A shard's most requests where the job gives no chunk size. A shard is Ray Data's unit of
# work (a task, a row back): 128 requests keep a replica's engine batch full and make that
# overhead negligible, while bounding what a replica still runs once its job's run window
# closes (the shard it started) or runs again when it is lost.
SHARD_REQUESTS = 128
GATE_POLL_SECONDS = 0.25  # how often the driver asks a windowed job's gate: a shard's start
DOOR_SECONDS = 30  # a replica's wait for the door's answer before it runs the shard anyway
RAY_MISSING = (
    "Ray is not installed: pip install -r requirements-ray.txt "
    "(ray[data]; never ray[llm] beside the CPU build of vLLM)"
)


# -- what travels to the replicas -------------------------------------------------------------


def request_to_dict(request: EngineRequest) -> dict[str, Any]:
    """A request as JSON-ready data for a replica; its ``url`` names its kind."""
    return asdict(request)


@cache
def _adapter(kind: type[EngineRequest]) -> TypeAdapter:
    return TypeAdapter(kind)


def request_from_dict(data: dict[str, Any]) -> EngineRequest:
    """A request the driver sent, validated back into the kind its ``url`` names (the
    requests stay plain dataclasses, fast to build in the check; pydantic checks them
    where they cross to another process).

    Raises:
        ValueError: an unknown url, or data that is not a request of its kind.
    """
    kind = KINDS.get(data.get("url"))
    if kind is None:
        raise ValueError(f"a request for url {data.get('url')!r}: no such endpoint")
    return _adapter(kind).validate_python(data)


def replica_engine_config(config: EngineConfig, settings: RaySettings) -> EngineConfig:
    """The engine each replica builds: its GPUs are its tensor parallel size."""
    tp = int(settings.gpus_per_replica) or config.tensor_parallel_size
    return config.model_copy(update={"tensor_parallel_size": tp})


def replica_env(
    config: EngineConfig, settings: RaySettings, storage: bool = False
) -> dict[str, str]:
    """Environment of the replicas (Ray's runtime_env).

    On CPU nodes vLLM runs in-process and eager with a fixed KV cache (as in
    ``core.run.engine``); each replica gets as many OpenMP threads as it has CPUs, unbound and
    waiting passively (:func:`core.run.engine.cpu_thread_settings`: replicas that share a
    machine do not pin the same cores). ``VLLM_*`` variables set by the user here win.
    With ``storage`` (the replicas read or write objects) the ``AWS_*`` variables go too:
    the store's endpoint, region and credentials, as boto3 reads them here.
    """
    env: dict[str, str] = {}
    if not settings.gpus_per_replica:
        env = {
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_CPU_KVCACHE_SPACE": str(max(1, round(config.cpu_kv_cache_gib))),
            **cpu_thread_settings(max(1, math.floor(settings.cpus_per_replica))),
        }
    prefixes = ("VLLM_", "AWS_") if storage else ("VLLM_",)
    env.update({k: v for k, v in os.environ.items() if k.startswith(prefixes)})
    return env


class Replica:
    """One engine replica: an actor of the Ray Data actor pool; loads the model once."""

    def __init__(
        self,
        engine: dict[str, Any],
        model: str,
        defaults: dict[str, Any] | None = None,
        parts: str | None = None,
        door: Any = None,
    ) -> None:
        import ray

        from core.run.engine import Engine

        context = ray.get_runtime_context()
        self.node_id = context.get_node_id()
        self.replica_id = context.get_actor_id() or f"pid-{os.getpid()}"
        self.model = model
        self.parts = parts  # where to write result parts (None: lines go back over Ray)
        self.door = door  # the job's run window, a Door's handle (None: any time)
        self.defaults = JobDefaults.model_validate(defaults or {})
        self.engine = Engine(EngineConfig.model_validate(engine))
        self.load_seconds = self.engine.load_seconds

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        from core.run.retry import run_chunk

        keys = ("lines", "node_id", "replica_id", "pid", "seconds", "resources", "problem", "held")
        out: dict[str, list[Any]] = {k: [] for k in keys}
        for raw in batch["requests"] if "requests" in batch else batch["object"]:
            started = time.monotonic()
            held = not self._admitted()  # the run window closed: not started, sent back
            lines, problem = [], ""
            if not held:
                try:
                    requests = self._requests(raw, "object" in batch)
                except StorageError as exc:  # said to the driver, which stops the job with it
                    problem = str(exc)
                else:
                    lines = run_chunk(self.engine, requests, self.model)
            for line in lines:
                line["node_id"] = self.node_id
            sent: Any = lines
            if self.parts and lines:  # the driver gets where they are, not the lines
                try:
                    sent = ray_output.write_part(self.parts, lines).model_dump()
                except StorageError as exc:
                    sent, problem = [], str(exc)
            out["lines"].append(json.dumps(sent, ensure_ascii=False))
            out["node_id"].append(self.node_id)
            out["replica_id"].append(self.replica_id)
            out["pid"].append(os.getpid())
            out["seconds"].append(round(time.monotonic() - started, 3))
            out["resources"].append(json.dumps(_own_resources(self.load_seconds)))
            out["problem"].append(problem)
            out["held"].append(held)
        return out

    def _admitted(self) -> bool:
        """Whether the job's run window lets this replica start a shard (its door open). A
        door that does not answer admits it: the driver still holds the rest between
        passes."""
        if self.door is None:
            return True
        import ray

        try:
            return bool(ray.get(self.door.is_open.remote(), timeout=DOOR_SECONDS))
        except ray.exceptions.RayError as exc:
            log.warning("the run window's door did not answer (%s): the shard runs", exc)
            return True

    def _requests(self, raw: str, in_object: bool) -> list[EngineRequest]:
        if in_object:
            return read_requests(ObjectShard.model_validate_json(raw), self.defaults)
        return [request_from_dict(d) for d in json.loads(raw)]


class Door:
    """A windowed job's run window as its replicas see it: open until the driver closes it
    (a Ray actor on the driver's node; once closed it stays closed for the run, as the
    job's gate does)."""

    def __init__(self) -> None:
        self.open = True

    def close(self) -> None:
        self.open = False

    def is_open(self) -> bool:
        return self.open


class WindowWatch:
    """A thread of the driver that asks the job's gate (``admit``) every ``seconds`` while
    a pass runs and calls ``close`` once when it refuses: the replicas' door shuts within
    that time, not when the pass's next row comes back."""

    def __init__(
        self, admit: Callable[[], bool], close: Callable[[], object], seconds: float
    ) -> None:
        self.admit, self.close, self.seconds = admit, close, seconds
        self.closed = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ray-run-window", daemon=True)

    def __enter__(self) -> WindowWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(self.seconds):
            if not self.admit():
                self.close()
                self.closed = True
                return


def _own_resources(load_seconds: float) -> dict[str, Any]:
    """The replica's own memory, CPU and GPU memory, reported with each shard."""
    import psutil

    process = psutil.Process()
    found: dict[str, Any] = {
        "rss_mib": round(process.memory_info().rss / 2**20),
        "cpu_seconds": round(sum(process.cpu_times()[:2]), 1),
        "load_seconds": round(load_seconds, 2),
    }
    try:
        import torch

        if torch.cuda.is_available():
            found["gpu_memory_mib"] = round(torch.cuda.memory_reserved() / 2**20)
    except Exception:  # no torch or no CUDA: CPU figures only
        pass
    return found


def _check_model_folder(model: str) -> dict[str, Any]:
    """Runs on one node: is the model folder there and readable?"""
    import socket

    path = Path(model)
    problem = None
    if not path.is_dir():
        problem = "does not exist"
    elif not (path / "config.json").is_file() or not os.access(path / "config.json", os.R_OK):
        problem = "has no readable config.json"
    return {"host": socket.gethostname(), "problem": problem}


# -- the executor ------------------------------------------------------------------------------


class RayExecutor:
    """Replicas of the engine on a Ray cluster, fed shards by Ray Data."""

    def __init__(self, spec: JobSpec, job_dir: str | Path | None = None) -> None:
        if spec.ray is None:
            raise EngineLoadError("the job names no Ray cluster")
        self.settings = spec.ray
        self.config = replica_engine_config(spec.engine, self.settings)
        self.model = self.config.model_name
        self.chunk_size = spec.chunk_size
        self.spec = spec
        self.job_dir = Path(job_dir) if job_dir is not None else None
        self.object_input = replicas_read_input(spec)  # the worker then kept no prompts
        self.parts = ray_output.job_parts(spec)  # where replicas write results, if they do
        self.acks = ray_output.AckLedger(JobFolder(job_dir).acks) if job_dir else None
        self.etag: str | None = None  # the input object's, when the replicas read it
        self.spans: dict[str, tuple[int, int]] = {}  # custom_id -> its line in the object
        self.stats = RayStats(Path(job_dir) if job_dir is not None else None, self.settings)
        started = time.monotonic()
        self._started_ray = False
        self._connect()
        try:
            self.check_model_on_nodes()
        except BaseException:
            self.close()
            raise
        self.load_seconds = time.monotonic() - started  # the replicas load as the job starts
        self._stopped = False
        self.notify: Callable[[str], None] | None = None  # the job's history (the worker's)
        # The job's run windows: asked before each pass, and relayed to the replicas during
        # one (a Door), which start no shard once it is closed (the running ones finish).
        self.admit: Callable[[], bool] | None = None
        self.window = 0  # each replica has its own engine
        s = self.settings
        self.description = (
            f"on {self.model}: {s.replicas} replica(s) on the Ray cluster at {s.address} "
            f"({s.cpus_per_replica:g} CPU, {s.gpus_per_replica:g} GPU each)"
        )

    def _connect(self) -> None:
        try:
            import ray
        except ImportError as exc:
            raise EngineLoadError(RAY_MISSING) from exc
        import core

        if ray.is_initialized():
            return
        runtime_env = {
            "env_vars": replica_env(
                self.config, self.settings, self.object_input or self.parts is not None
            ),
            # The nodes import Batch Studio's engine code from here, not from their disks.
            "py_modules": [str(Path(core.__file__).parent)],
        }
        try:
            context = ray.init(
                address=self.settings.address,
                runtime_env=runtime_env,
                log_to_driver=True,
                logging_level=logging.WARNING,
            )
        except Exception as exc:
            raise EngineLoadError(
                f"cannot connect to the Ray cluster at {self.settings.address}: {exc}"
            ) from exc
        self._started_ray = True
        self.stats.dashboard_url = _dashboard_url(context)

    def check_model_on_nodes(self) -> None:
        """Fails, naming the node, when a live node cannot read the model folder."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        check = ray.remote(num_cpus=0)(_check_model_folder)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        pending = {
            check.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(self.config.model): n
            for n in nodes
        }
        bad = []
        for ref, node in pending.items():
            try:
                found = ray.get(ref, timeout=120)
            except Exception as exc:
                found = {"host": node.get("NodeManagerHostname"), "problem": f"unchecked: {exc}"}
            if found["problem"]:
                bad.append(
                    f"node {node['NodeID'][:12]} ({found['host']}, "
                    f"{node.get('NodeManagerAddress')}): {found['problem']}"
                )
        if bad:
            raise EngineLoadError(
                f"the model folder {self.config.model} must be readable at the same path on "
                "every Ray node (a shared file system, or a copy on each node); " + "; ".join(bad)
            )

    def stop(self) -> None:
        """Stops taking results: a cancel on a cluster keeps what has come back; the shards
        still running on the replicas are dropped."""
        self._stopped = True

    def activity(self) -> None:
        return None  # the replicas' engines are in other processes; progress is per shard

    def run(self, requests: Requests) -> Iterator[list[dict]]:
        left = {r.custom_id: r for r in requests}  # light: the replicas read the texts
        self.stats.notify = self.notify
        self.stats.start(len(left))
        try:
            if self.object_input:
                self._find_lines(set(left))
            if self.parts and self.job_dir is not None:
                yield from self._recover(left)
            held = False  # the run window closed: the rest waits for the job's next run
            for attempt in range(1, MAX_PASSES + 1):
                held = self.admit is not None and not self.admit()
                if not left or self._stopped or held:
                    break
                if attempt > 1:
                    log.warning("Ray pass %d: %d requests without a result", attempt, len(left))
                    self.stats.rerun(len(left))
                before = len(left)
                try:
                    for lines in self._one_pass(list(left.values()), first=attempt == 1):
                        fresh = [line for line in lines if left.pop(line["custom_id"], None)]
                        if fresh:
                            yield fresh
                        if self._stopped:
                            break
                except StorageError:  # the store refused: the job stops, saying why
                    raise
                except Exception as exc:  # a replica or the dataset failed: run the rest again
                    log.warning("Ray pass %d ended with %r", attempt, exc)
                    self.stats.error = repr(exc)[:500]
                    if len(left) == before:  # nothing ran: the replicas cannot start or load
                        raise EngineLoadError(f"the Ray replicas did not run: {exc}") from exc
            if left and not self._stopped and not held:
                message = f"no result after {MAX_PASSES} passes on the Ray cluster"
                yield [error_line(cid, "engine_error", message, 500) for cid in left]
        finally:
            self.stats.stop()
            self.close()

    def _one_pass(self, requests: list[EngineRequest], first: bool) -> Iterator[list[dict]]:
        """One Ray Data dataset over ``requests``. The first waits for every replica before
        handing out shards; a later one (after a lost node) starts with those that fit on
        the live nodes rather than wait for a node that may not come back."""
        import ray

        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        # Every replica loads its model before the first shard is handed out; otherwise the
        # first one up takes the whole queue while the others still load.
        context.wait_for_min_actors_s = REPLICA_START_SECONDS
        s = self.settings
        size = shard_size(len(requests), s.replicas, self.chunk_size)
        shards = [self._shard(requests[i : i + size]) for i in range(0, len(requests), size)]
        door = self._door()
        with warnings.catch_warnings():  # max_restarts has no named parameter in 2.60
            warnings.filterwarnings("ignore", message=".*ray_remote_args")
            dataset = ray.data.from_items(shards, override_num_blocks=len(shards)).map_batches(
                Replica,
                fn_constructor_kwargs={
                    "engine": self.config.model_dump(),
                    "model": self.model,
                    "defaults": self.spec.defaults.model_dump(),
                    "parts": self.parts if self.acks else None,
                    "door": door,
                },
                batch_size=1,
                compute=ray.data.ActorPoolStrategy(
                    min_size=s.replicas if first else 1,
                    max_size=s.replicas,
                    max_tasks_in_flight_per_actor=2,
                ),
                num_cpus=s.cpus_per_replica,
                num_gpus=s.gpus_per_replica,
                resources=s.resources or None,
                max_restarts=REPLICA_RESTARTS,
                max_task_retries=REPLICA_RESTARTS,
            )
        # Closed here, not when the exception that ends a pass lets go of this frame: Ray
        # Data's executor, stopped after ray.shutdown(), ended the worker's process.
        rows = iter(dataset.iter_rows())
        try:
            with self._watch(door):
                for row in rows:
                    if row["problem"]:
                        raise StorageError(row["problem"])
                    if row["held"]:  # not started, its run window closed: left for the next run
                        continue
                    lines = json.loads(row["lines"])
                    if isinstance(lines, dict):  # a part's acknowledgement: durable, then read
                        ack = ray_output.PartAck.model_validate(lines)
                        assert self.acks is not None
                        self.acks.append(ack)
                        lines = list(ray_output.read_part(ack))
                    self.stats.record(row, lines)
                    yield lines
        finally:
            rows.close()

    def _door(self) -> Any:
        """The door this pass's replicas ask before each shard, on the driver's node (None:
        the job has no run windows, and the replicas ask nothing)."""
        if self.admit is None:
            return None
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        door = ray.remote(num_cpus=0)(Door)
        # Ends with its last handle: the pass's, and its replicas'.
        return door.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True)
        ).remote()

    def _watch(self, door: Any) -> contextlib.AbstractContextManager[object]:
        """While a pass runs: the job's gate asked in a thread, its door closed when it
        refuses (nothing without windows)."""
        if door is None or self.admit is None:
            return contextlib.nullcontext()
        return WindowWatch(self.admit, door.close.remote, GATE_POLL_SECONDS)

    def _recover(self, left: dict[str, EngineRequest]) -> Iterator[list[dict]]:
        """The lines of requests acknowledged in an earlier run whose lines the job
        folder lacks (its driver stopped in between): read from their parts, not run again;
        a part that cannot be read any more is run again."""
        assert self.job_dir is not None
        for ack in ray_output.acked_without_line(self.job_dir, set(left)):
            try:
                lines = list(ray_output.read_part(ack))
            except StorageError as exc:
                log.warning("acknowledged results run again: %s", exc)
                continue
            fresh = [line for line in lines if left.pop(line["custom_id"], None)]
            if fresh:
                yield fresh

    def _find_lines(self, ids: set[str]) -> None:
        """Where each request's line is in the input object (from the job folder's copy,
        streamed), and the object's version; an object that is not the job's is refused."""
        assert self.job_dir is not None
        local = JobFolder(self.job_dir).input
        found = stat(self.spec.source)
        if found.size != local.stat().st_size:
            raise StorageError(
                f"cannot read {self.spec.source}: it is {found.size:,} bytes, the job's input "
                f"{local.stat().st_size:,}; the object changed since the job was made"
            )
        self.etag = found.etag
        self.spans = input_spans(local, ids)

    def _shard(self, requests: list[EngineRequest]) -> dict[str, str]:
        """One row of the dataset: the requests, or where their lines are in the object."""
        if not self.object_input:
            return {"requests": json.dumps([request_to_dict(r) for r in requests])}
        lines = sorted(((r.custom_id, *self.spans[r.custom_id]) for r in requests), key=_offset)
        shard = ObjectShard(source=self.spec.source, etag=self.etag, lines=lines)
        return {"object": shard.model_dump_json()}

    def close(self) -> None:
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False


def _offset(line: tuple[str, int, int]) -> int:
    return line[1]


def shard_size(requests: int, replicas: int, chunk_size: int | None) -> int:
    """Requests per shard: at most the job's chunk size, and small enough that every
    replica gets at least two shards (a slow or lost shard then delays less)."""
    cap = chunk_size or SHARD_REQUESTS
    return max(1, min(cap, math.ceil(requests / (2 * replicas))))


def _dashboard_url(context: Any) -> str | None:
    url = getattr(context, "dashboard_url", None) or None
    if url and not url.startswith("http"):
        url = f"http://{url}"
    return url


def ray_settings(
    address: str | None,
    replicas: int = 1,
    gpus_per_replica: float = 0,
    cpus_per_replica: float = 1,
    resources: dict[str, float] | None = None,
) -> RaySettings | None:
    """``spec.ray`` from a form or the command line; None (this machine) without address.

    Raises:
        pydantic.ValidationError: a setting out of its bounds (see ``RaySettings``).
    """
    if not address:
        return None
    given = {
        "address": address,
        "replicas": replicas,
        "gpus_per_replica": gpus_per_replica,
        "cpus_per_replica": cpus_per_replica,
        "resources": dict(resources or {}),
    }
    return RaySettings.model_validate(given, context={"new": True})
