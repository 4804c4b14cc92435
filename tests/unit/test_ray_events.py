"""What a Ray job's stats make of the cluster changing under it (no cluster: Ray's answers
are given, NVML's on a GPU node too), and what Monitor and Jobs show of it. The reading of a
GPU node's devices on a real node is in tests/ray/test_ray.py (it starts Ray)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
from core.run import ray_stats  # noqa: E402
from core.run.ray_stats import read_ray_stats  # noqa: E402
from tests.support.ray_events import HEAD, LOST, SPARE, _stats  # noqa: E402


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


def test_the_replicas_are_asked_of_the_cluster_the_job_runs_on(monkeypatch):
    """The state API is given the driver's own cluster: left to find one, it takes the
    latest Ray instance started on the machine, and Ray ended a job's worker when that one
    was gone (a fresh-clone run's resume exited 3, its job left running)."""
    from types import SimpleNamespace

    from ray.util import state

    asked = []
    context = SimpleNamespace(gcs_address="10.0.0.7:6379", get_job_id=lambda: "01000000")
    monkeypatch.setattr(ray, "get_runtime_context", lambda: context)
    monkeypatch.setattr(state, "list_actors", lambda **kwargs: asked.append(kwargs) or [])
    assert ray_stats._replica_actors() == []
    [kwargs] = asked
    assert kwargs["address"] == "10.0.0.7:6379"
    assert kwargs["filters"] == [("job_id", "=", "01000000")]
