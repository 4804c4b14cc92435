"""What a Ray job's stats make of the cluster changing under it (no cluster: Ray's answers
are given, NVML's on a GPU node too), and what Monitor and Jobs show of it."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from core.run import ray_stats  # noqa: E402
from core.run.ray_stats import RayStats, read_ray_stats  # noqa: E402
from core.schemas import RaySettings  # noqa: E402
from tests.support.jobs import finished_job  # noqa: E402

HEAD, LOST, SPARE = "a" * 56, "b" * 56, "c" * 56


class Cluster:
    """Ray's answers about three nodes and two replicas, as the GCS gives them."""

    def __init__(self, monkeypatch) -> None:
        self.alive = {HEAD: True, LOST: True, SPARE: True}
        self.replica_nodes = {"r" * 32: HEAD, "s" * 32: LOST}
        monkeypatch.setattr(ray, "nodes", self.nodes)
        monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 3.0, "slot": 3.0})
        monkeypatch.setattr(ray, "available_resources", lambda: {"CPU": 1.0, "slot": 1.0})
        monkeypatch.setattr(ray_stats, "_replica_actors", self.actors)
        monkeypatch.setattr(ray_stats, "_node_devices", self.devices)

    def devices(self, nodes: list[dict]) -> dict[str, list[dict]]:
        """What NVML on a GPU node answers: here the spare node has one device."""
        used, total = 5120.0, 81559.0
        gpu = {"index": 0, "memory_used_mib": used, "memory_total_mib": total, "utilization": 37}
        return {SPARE: [gpu]}

    def nodes(self) -> list[dict]:
        return [
            {
                "NodeID": node,
                "Alive": alive,
                "NodeManagerAddress": f"10.0.0.{i}",
                "NodeManagerHostname": f"host{i}",
                "Resources": {"CPU": 1.0, "slot": 1.0},
            }
            for i, (node, alive) in enumerate(self.alive.items())
        ]

    def actors(self) -> list[dict]:
        return [
            {"replica_id": r, "node_id": n, "state": "ALIVE", "cls": "MapWorker", "pid": 7}
            for r, n in self.replica_nodes.items()
        ]


def _stats(tmp_path, monkeypatch) -> tuple[RayStats, Cluster, list[str]]:
    cluster = Cluster(monkeypatch)
    stats = RayStats(tmp_path, RaySettings(address="auto", replicas=2, resources={"slot": 1}))
    noted: list[str] = []
    stats.notify = noted.append
    stats.total = 8
    stats._poll()
    for replica, node in cluster.replica_nodes.items():
        row = {"node_id": node, "replica_id": replica, "pid": 7, "seconds": 1.0}
        stats.record({**row, "resources": "{}"}, [{"custom_id": "x", "error": None}] * 2)
    return stats, cluster, noted


def test_a_lost_node_and_its_replica_moving_are_events_and_notes(tmp_path, monkeypatch):
    stats, cluster, noted = _stats(tmp_path, monkeypatch)
    assert noted == []  # nothing happened yet
    cluster.alive[LOST] = False
    cluster.replica_nodes["s" * 32] = SPARE  # Ray restarted the replica on the spare node
    stats._poll()
    written = read_ray_stats(tmp_path)
    lost = next(n for n in written["nodes"] if n["node_id"] == LOST)
    assert lost["alive"] is False and lost["done"] == 2
    assert noted[0].startswith(f"node {LOST[:12]} (10.0.0.1) lost with 1 replica(s) on it")
    assert noted[1] == (
        f"replica {'s' * 12} restarted on node {SPARE[:12]} (was on {LOST[:12]}): "
        "its work moves there"
    )
    assert [e["event"] for e in written["events"]] == noted
    stats._poll()  # a dead node stays dead: told once
    assert len(noted) == 2
    stats.rerun(3)
    assert noted[-1] == "3 request(s) without a result run again on the live nodes"


def test_each_node_has_its_rate(tmp_path, monkeypatch):
    stats, _, _ = _stats(tmp_path, monkeypatch)
    stats.write()
    nodes = {n["node_id"]: n for n in read_ray_stats(tmp_path)["nodes"]}
    assert nodes[HEAD]["rows_per_s"] > 0 and nodes[LOST]["rows_per_s"] > 0
    assert nodes[SPARE]["rows_per_s"] == 0


def test_monitor_and_jobs_show_the_node_lost_and_its_work_moving(
    studio_home, tmp_path, monkeypatch
):
    from tests.support.pages import open_page, texts

    job = finished_job(studio_home, {"a": "yes"})
    stats, cluster, _ = _stats(job.path, monkeypatch)
    stats.notify = lambda text: _note(job, text)
    cluster.alive[LOST] = False
    cluster.replica_nodes["s" * 32] = SPARE
    stats._poll()
    at = open_page("monitor.py", job_id=job.job_id)
    shown = texts(at)
    assert f"node {LOST[:12]} (10.0.0.1) lost with 1 replica(s)" in shown
    assert f"restarted on node {SPARE[:12]}" in shown
    nodes = next(d.value for d in at.dataframe if "alive" in d.value.columns)
    assert nodes.set_index("host")["alive"].to_dict() == {
        "host0": True,
        "host1": False,
        "host2": True,
    }
    assert "rows/s" in nodes.columns
    devices = next(d.value for d in at.dataframe if "memory used MiB" in d.value.columns)
    assert devices.to_dict("records") == [
        {
            "node": SPARE[:12],
            "host": "host2",
            "GPU": 0,
            "memory used MiB": 5120,
            "memory total MiB": 81559,
            "utilisation %": 37,
        }
    ]
    at.switch_page("pages/jobs.py").run()
    history = next(t.value for t in at.table if "note" in t.value.columns)
    assert any("lost with 1 replica(s)" in note for note in history["note"])


def _note(job, text: str) -> None:
    status = job.read_status()
    status.note(text)
    job.write_status(status)


def test_each_gpu_node_is_asked_for_its_devices_on_the_node(monkeypatch):
    """A real local Ray instance declaring one GPU: the reading runs on that node and
    answers what NVML finds there (no device on a machine without a driver). A reading that
    misses (the node slow to start a worker) is left out; the next poll's gets it."""
    from core.run.monitoring import ResourceSampler

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=1, num_gpus=1, include_dashboard=False)
    try:
        nodes = ray.nodes()
        [node] = [n["NodeID"] for n in nodes]
        readings = [ray_stats._node_devices(nodes)]
        deadline = time.monotonic() + 120  # a reading may miss while the node starts a worker
        while not readings[-1] and time.monotonic() < deadline:
            readings.append(ray_stats._node_devices(nodes))
        assert readings[-1] == {node: ResourceSampler().sample()["gpus"]}
        cpu_only = [{**n, "Resources": {"CPU": 1.0}} for n in nodes]
        assert ray_stats._node_devices(cpu_only) == {}  # CPU nodes are not asked
    finally:
        ray.shutdown()
