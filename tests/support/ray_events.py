"""What the tests split from tests/unit/test_ray_events.py by kind share (docs/tests.md)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
from core.run import ray_stats  # noqa: E402
from core.run.ray_stats import RayStats  # noqa: E402
from core.schemas import RaySettings  # noqa: E402

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
