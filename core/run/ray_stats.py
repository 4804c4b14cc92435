"""``ray.json``: what a Ray job's replicas and nodes are doing, for Monitor.

While a job runs on a Ray cluster, :class:`RayStats` keeps, per node and per replica, the
requests done and their rate, each replica's state, memory, GPU memory, load and busy time,
the nodes' resources and the dashboard link, and writes them to ``ray.json`` in the job
folder every few seconds; :func:`read_ray_stats` reads them back.

What happens to the cluster under the job is kept as ``events``: a node lost (alive in
Ray's GCS, then not), a replica restarted on another node (its work moving there), and
requests run again in a new pass. Each event also goes to ``notify`` (the worker puts it
in the job's history).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.files import read_json, write_json_atomic
from core.schemas import RaySettings, now_iso

log = logging.getLogger(__name__)
STATS_SECONDS = 5.0
STATS_FILE = "ray.json"


class RayStats:
    """Per-node and per-replica progress and resources, written to ``ray.json``."""

    def __init__(self, job_dir: Path | None, settings: RaySettings) -> None:
        self.path = job_dir / STATS_FILE if job_dir is not None else None
        self.settings = settings
        self.dashboard_url: str | None = None
        self.error: str | None = None
        self.total = 0
        self.reruns: list[int] = []
        self.nodes: dict[str, dict[str, Any]] = {}
        self.replicas: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.notify: Callable[[str], None] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    def start(self, total: int) -> None:
        self.total = total
        self._started = time.monotonic()
        self._poll()
        self._thread = threading.Thread(target=self._loop, name="ray-stats", daemon=True)
        self._thread.start()

    def rerun(self, count: int) -> None:
        with self._lock:
            self.reruns.append(count)
        self._tell([f"{count} request(s) without a result run again on the live nodes"])
        self.write()

    def record(self, row: dict[str, Any], lines: list[dict]) -> None:
        with self._lock:
            done = len(lines)
            failed = sum(1 for line in lines if line.get("error"))
            node = self.nodes.setdefault(row["node_id"], {"node_id": row["node_id"]})
            node["done"] = node.get("done", 0) + done
            node["failed"] = node.get("failed", 0) + failed
            replica = self.replicas.setdefault(
                row["replica_id"], {"replica_id": row["replica_id"], "node_id": row["node_id"]}
            )
            replica["done"] = replica.get("done", 0) + done
            replica["failed"] = replica.get("failed", 0) + failed
            replica["shards"] = replica.get("shards", 0) + 1
            replica["busy_seconds"] = round(replica.get("busy_seconds", 0) + row["seconds"], 2)
            replica["pid"] = int(row["pid"])
            replica.update(json.loads(row["resources"]))
        self.write()

    def stop(self) -> None:
        """Stops polling after a last reading, so the file ends with the cluster as the job
        left it (a node lost in the job's last seconds is shown lost)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._poll()  # writes; when the cluster no longer answers, write what we know
        self.write()

    def _loop(self) -> None:
        while not self._stop.wait(STATS_SECONDS):
            self._poll()

    def _poll(self) -> None:
        """Nodes and their resources from Ray's GCS; actor states from the state API."""
        try:
            import ray

            total = ray.cluster_resources()
            available = ray.available_resources()
            nodes = ray.nodes()
            actors = _replica_actors()
            devices = _node_devices(nodes)
        except Exception as exc:  # the cluster went away: keep what we know
            log.debug("ray stats: %r", exc)
            return
        told: list[str] = []
        with self._lock:
            self.cluster = {"total": total, "available": available}
            for n in nodes:
                node = self.nodes.setdefault(n["NodeID"], {"node_id": n["NodeID"]})
                alive = bool(n.get("Alive"))
                if node.get("alive") and not alive:
                    told.append(self._node_lost(node))
                if n["NodeID"] in devices:
                    node["gpus"] = devices[n["NodeID"]]
                node.update(
                    alive=alive,
                    address=n.get("NodeManagerAddress"),
                    host=n.get("NodeManagerHostname"),
                    resources={
                        k: v
                        for k, v in (n.get("Resources") or {}).items()
                        if not k.startswith("node:")
                    },
                )
            for actor in actors:
                replica = self.replicas.setdefault(
                    actor["replica_id"],
                    {"replica_id": actor["replica_id"], "node_id": actor["node_id"]},
                )
                moved_to = actor["node_id"]
                if moved_to and replica["node_id"] and moved_to != replica["node_id"]:
                    told.append(
                        f"replica {actor['replica_id'][:12]} restarted on node {moved_to[:12]} "
                        f"(was on {replica['node_id'][:12]}): its work moves there"
                    )
                replica.update(
                    state=actor["state"],
                    node_id=moved_to or replica["node_id"],
                    pid=actor["pid"] or replica.get("pid"),
                )
        self._tell(told)
        self.write()

    def _node_lost(self, node: dict[str, Any]) -> str:
        """The event of a node that left the cluster (under the lock)."""
        on_it = [r for r in self.replicas.values() if r.get("node_id") == node["node_id"]]
        return (
            f"node {node['node_id'][:12]} ({node.get('address')}) lost with "
            f"{len(on_it)} replica(s) on it after {node.get('done', 0)} result(s) there; "
            "its unfinished work runs again on the other nodes"
        )

    def _tell(self, texts: list[str]) -> None:
        """Keeps events and hands them to ``notify`` (outside the lock: it writes status)."""
        if not texts:
            return
        with self._lock:
            self.events.extend({"at": now_iso(), "event": text} for text in texts)
        for text in texts:
            log.warning("ray: %s", text)
            if self.notify is not None:
                try:
                    self.notify(text)
                except Exception:  # the history is for show; the job goes on
                    log.exception("cannot note %r", text)

    def write(self) -> None:
        if self.path is None:
            return
        with self._lock:
            elapsed = max(time.monotonic() - self._started, 1e-6)
            for node in self.nodes.values():
                node["rows_per_s"] = round(node.get("done", 0) / elapsed, 3)
            data = {
                "updated_at": now_iso(),
                "elapsed_seconds": round(time.monotonic() - self._started, 1),
                "settings": self.settings.model_dump(),
                "dashboard_url": self.dashboard_url,
                "requests": self.total,
                "reruns": self.reruns,
                "error": self.error,
                "events": list(self.events),
                "cluster": getattr(self, "cluster", {}),
                "nodes": sorted(self.nodes.values(), key=lambda n: n["node_id"]),
                "replicas": sorted(self.replicas.values(), key=lambda r: r["replica_id"]),
            }
        try:
            write_json_atomic(self.path, data)
        except OSError as exc:
            log.warning("cannot write %s: %r", self.path, exc)


def _replica_actors() -> list[dict[str, Any]]:
    """The replica actors and their states: Ray's state API where the cluster runs its
    dashboard (``ray[default]``), else the GCS actor table. Only this job's map workers."""
    import ray

    context = ray.get_runtime_context()
    job_id = context.get_job_id()
    try:
        from ray.util.state import list_actors

        found = [
            {
                "replica_id": a.actor_id,
                "node_id": a.node_id,
                "state": a.state,
                "cls": a.class_name,
                "pid": a.pid,
            }
            for a in list_actors(
                # The cluster this driver is on. Without an address the state API asks the
                # latest Ray instance started on this machine (/tmp/ray), which may be
                # another cluster, or one gone: then Ray ends this process a minute later
                # ("Failed to connect to GCS"), leaving the job running with a dead worker.
                address=context.gcs_address,
                filters=[("job_id", "=", job_id)],
                limit=1000,
                raise_on_missing_output=False,
            )
        ]
    except Exception:  # no dashboard: the state API has no server to ask
        table = ray._private.state.actors()  # the GCS table behind the state API
        found = [
            {
                "replica_id": actor_id,
                "node_id": (a.get("Address") or {}).get("NodeID"),
                "state": a.get("State"),
                "cls": a.get("ActorClassName", ""),
                "pid": a.get("Pid"),
            }
            for actor_id, a in table.items()
            if a.get("JobID") == job_id
        ]
    return [a for a in found if "MapWorker" in (a["cls"] or "")]


def _node_devices(nodes: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each live GPU node's devices (memory used and total, utilisation), read by NVML on
    the node itself: a task of no CPU pinned there (NVML sees every device of the node,
    whatever the task's CUDA_VISIBLE_DEVICES). A node that does not answer in time is left
    out of this reading; a failed reading leaves the rest of the stats alone."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    gpu_nodes = [
        n["NodeID"] for n in nodes if n.get("Alive") and (n.get("Resources") or {}).get("GPU")
    ]
    found: dict[str, list[dict[str, Any]]] = {}
    if not gpu_nodes:
        return found
    try:
        read = ray.remote(num_cpus=0)(_devices_here)
        refs = {
            node: read.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
            ).remote()
            for node in gpu_nodes
        }
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=STATS_SECONDS)
        for node, ref in refs.items():
            if ref in ready:
                found[node] = ray.get(ref)
    except Exception as exc:  # a node lost while it answered: no reading this time
        log.debug("ray devices: %r", exc)
    return found


def _devices_here() -> list[dict[str, Any]]:
    """This node's GPUs as the worker's own samples describe them (core.run.monitoring)."""
    from core.run.monitoring import ResourceSampler

    return ResourceSampler().sample()["gpus"]


def read_ray_stats(job_dir: str | Path) -> dict[str, Any] | None:
    """A job's ``ray.json`` (None for a local job or before the cluster answered)."""
    stats = read_json(Path(job_dir) / STATS_FILE)
    return stats if isinstance(stats, dict) else None


def node_rows(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per node of ``ray.json``, as Monitor tables them."""
    return [
        {
            "node": (n.get("node_id") or "")[:12],
            "host": n.get("host"),
            "address": n.get("address"),
            "alive": n.get("alive"),
            "done": n.get("done", 0),
            "rows/s": n.get("rows_per_s"),
            "failed": n.get("failed", 0),
            "CPU": (n.get("resources") or {}).get("CPU"),
            "GPU": (n.get("resources") or {}).get("GPU"),
        }
        for n in stats.get("nodes", [])
    ]


def replica_rows(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per replica of ``ray.json``, as Monitor tables them."""
    return [
        {
            "replica": (r.get("replica_id") or "")[:12],
            "node": (r.get("node_id") or "")[:12],
            "state": r.get("state"),
            "done": r.get("done", 0),
            "shards": r.get("shards", 0),
            "busy s": r.get("busy_seconds"),
            "load s": r.get("load_seconds"),
            "RSS MiB": r.get("rss_mib"),
            "GPU MiB": r.get("gpu_memory_mib"),
            "CPU s": r.get("cpu_seconds"),
        }
        for r in stats.get("replicas", [])
    ]


def device_rows(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per GPU of each node (read on the node by NVML: :func:`_node_devices`)."""
    return [
        {
            "node": (n.get("node_id") or "")[:12],
            "host": n.get("host"),
            "GPU": gpu.get("index"),
            "memory used MiB": round(gpu.get("memory_used_mib", 0)),
            "memory total MiB": round(gpu.get("memory_total_mib", 0)),
            "utilisation %": gpu.get("utilization"),
        }
        for n in stats.get("nodes", [])
        for gpu in n.get("gpus") or ()
    ]
