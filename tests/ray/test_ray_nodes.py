"""A job on a three-node Ray cluster simulated on this machine (real engine, CPU) survives a
node lost mid-job. (Its client, the worker that is Ray's driver, killed and resumed: the
shared cluster's test in tests/ray/test_ray.py.)

Each node has one CPU and a custom resource ``slot``; the job asks for two replicas of one
slot each, so one node is spare: a lost node's replica restarts there, as a real cluster's
autoscaler would bring a node back. The GCS checks nodes every second, so a lost node is
seen within seconds. The cluster is its own (the node goes with it) and always shut down.
"""

from __future__ import annotations

import json
import os
import time

import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from core.jobs.folder import JobFolder, start_worker  # noqa: E402
from core.jobs.ledger import reconcile, verify  # noqa: E402
from core.run.ray_stats import read_ray_stats  # noqa: E402
from core.store.db import Store  # noqa: E402
from tests.support.ray import _batch  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.ray]  # one worker runs the cluster tests in turn
REQUESTS = 24
FAST_HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}


@pytest.fixture(scope="module")
def cluster():
    os.environ["RAY_AUTH_MODE"] = "disabled"  # ray start turns token auth on in 2.60
    nodes = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "resources": {"slot": 1},
            "_system_config": FAST_HEALTH_CHECKS,
        },
    )
    try:
        for _ in range(2):
            nodes.add_node(num_cpus=1, resources={"slot": 1})
        nodes.wait_for_nodes()
        yield nodes
    finally:
        nodes.shutdown()


def _job(cluster, tmp_path, default_model):
    from core.config import data_paths
    from core.jobs.folder import create_job
    from core.run.ray_cluster import ray_settings
    from core.schemas import EngineConfig

    return create_job(
        _batch(tmp_path / "batch.jsonl", REQUESTS),
        data_paths().jobs,
        EngineConfig(model=str(default_model)),
        chunk_size=2,
        ray=ray_settings(cluster.address, 2, 0, 1, {"slot": 1}),
    )


def _exactly_once(job) -> None:
    """Every request has exactly one line, a success, and the ledger agrees."""
    ids = [json.loads(line)["custom_id"] for line in job.output.read_text().splitlines()]
    assert sorted(ids) == sorted(f"r{i}" for i in range(REQUESTS))  # none twice, none missing
    report = reconcile(job)
    assert report.complete and report.succeeded == REQUESTS, report.to_dict()
    assert verify(job).ok
    assert job.read_status().state == "completed"


def _replicas_busy(job, worker, timeout=400.0) -> list[dict]:
    """The replicas (on their nodes), once both have handed back a shard and at least a
    third of the requests are still to come (each replica holds shards in flight)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert worker.poll() is None, job.log_tail(40)
        stats = read_ray_stats(job.path) or {}
        replicas = [r for r in stats.get("replicas", []) if r.get("shards")]
        if len(replicas) == 2 and job.read_status().done <= REQUESTS * 2 // 3:
            return replicas
        time.sleep(0.2)
    raise AssertionError(f"no results within {timeout} s: {job.log_tail(40)}")


def test_a_node_lost_mid_job_loses_nothing_and_the_job_says_so(
    cluster, studio_home, tmp_path, default_model
):
    job = _job(cluster, tmp_path, default_model)
    worker = start_worker(job)
    try:
        replicas = _replicas_busy(job, worker)
        head = cluster.head_node.node_id
        victim = next(r["node_id"] for r in replicas if r["node_id"] != head)
        node = next(n for n in cluster.worker_nodes if n.node_id == victim)
        cluster.remove_node(node, allow_graceful=False)  # its raylet and replica die at once
        store = Store(tmp_path / "studio.duckdb")
        arrived = store.ingest(job)  # the pages' store has the shards finished so far
        assert 0 < arrived < REQUESTS
        assert worker.wait(timeout=600) == 0, JobFolder(job.path).log_tail(60)
    finally:
        if worker.poll() is None:
            worker.kill()
    _exactly_once(job)
    assert arrived + store.ingest(job) == REQUESTS  # the rest, each once
    stats = read_ray_stats(job.path)
    lost = next(n for n in stats["nodes"] if n["node_id"] == victim)
    assert lost["alive"] is False  # Monitor's node table shows it dead
    events = [e["event"] for e in stats["events"]]
    assert any(e.startswith(f"node {victim[:12]}") and "lost" in e for e in events), events
    notes = [h["note"] for h in job.read_status().history if h.get("note")]
    assert any(f"node {victim[:12]}" in n and "lost" in n for n in notes), notes
    lines = [json.loads(line) for line in job.output.read_text().splitlines()]
    assert {line["node_id"] for line in lines} - {victim}  # the rest ran on live nodes
