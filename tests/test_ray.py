"""The Ray executor on a two-node Ray cluster simulated on this machine (real engine, CPU).

Each node has one CPU and a custom resource ``slot``; a replica asks for one of each, so
the two replicas land on different nodes. The cluster is started once for the module
(seconds, and about 6 GB with two engines) and always shut down.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from core.jobs.folder import JobFolder, list_jobs, start_worker  # noqa: E402
from core.jobs.ledger import reconcile, verify  # noqa: E402
from core.run.ray_stats import read_ray_stats  # noqa: E402
from tests.conftest import run_cli  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.ray]


@pytest.fixture(scope="module")
def cluster():
    os.environ["RAY_AUTH_MODE"] = "disabled"  # ray start turns token auth on in 2.60
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"slot": 1}})
    try:
        nodes.add_node(num_cpus=1, resources={"slot": 1})
        nodes.wait_for_nodes()
        yield nodes
    finally:
        nodes.shutdown()


def _batch(path, count):
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            body = {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": f"Name a colour. ({i})"}],
                "max_tokens": 8,
                "temperature": 0,
            }
            line = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}) + "\n")
    return path


def _ray_args(cluster):
    return ["--ray", cluster.address, "--replicas", "2", "--replica-resources", '{"slot": 1}']


def _lines(path):
    return {
        line["custom_id"]: line
        for line in map(json.loads, path.read_text(encoding="utf-8").splitlines())
    }


def _local_and_on_ray(cluster, batch, tmp_path):
    """The output lines of ``batch`` run here and on the cluster, by custom_id."""
    local_out, ray_out = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    local = run_cli("run", str(batch), "-o", str(local_out), "--chunk-size", "2")
    on_ray = run_cli(
        "run", str(batch), "-o", str(ray_out), "--chunk-size", "2", *_ray_args(cluster)
    )
    assert local.returncode == 0, local.stderr[-2000:]
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    return _lines(local_out), _lines(ray_out)


def test_a_job_spreads_over_two_nodes_and_matches_a_local_run(
    cluster, studio_home, tmp_path, default_model
):
    batch = _batch(tmp_path / "batch.jsonl", 8)
    local_lines, ray_lines = _local_and_on_ray(cluster, batch, tmp_path)
    assert list(ray_lines) == [f"r{i}" for i in range(8)]
    node_ids = {node.node_id for node in cluster.list_all_nodes()}
    assert {line["node_id"] for line in ray_lines.values()} == node_ids  # both nodes worked
    for cid, line in ray_lines.items():
        ours, theirs = line["response"]["body"], local_lines[cid]["response"]["body"]
        assert ours["choices"][0]["message"] == theirs["choices"][0]["message"]
        assert ours["usage"] == theirs["usage"]
        assert line["latency_ms"] > 0  # replicas time their requests as the local engine does
    job = next(j for j in list_jobs(studio_home / "jobs") if j.read_spec().ray)
    assert verify(job).ok
    stats = read_ray_stats(job.path)
    assert {n["node_id"] for n in stats["nodes"] if n.get("done")} == node_ids
    assert sum(r["done"] for r in stats["replicas"] if "done" in r) == 8


def test_an_embeddings_job_spreads_over_two_nodes_and_matches_a_local_run(
    cluster, studio_home, tmp_path
):
    import numpy as np

    batch = tmp_path / "embed.jsonl"
    with batch.open("w") as out:
        for i in range(8):
            body = {"model": "text-embedding-3-small", "input": [f"Ticket {i}", f"Refund {i}"]}
            line = {"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings"}
            out.write(json.dumps({**line, "body": body}) + "\n")
    local_lines, ray_lines = _local_and_on_ray(cluster, batch, tmp_path)
    assert list(ray_lines) == [f"e{i}" for i in range(8)]
    node_ids = {node.node_id for node in cluster.list_all_nodes()}
    assert {line["node_id"] for line in ray_lines.values()} == node_ids  # both nodes worked
    for cid, line in ray_lines.items():
        ours, theirs = line["response"]["body"], local_lines[cid]["response"]["body"]
        assert ours["usage"] == theirs["usage"] and len(ours["data"]) == 2
        for a, b in zip(ours["data"], theirs["data"], strict=True):
            u, v = np.asarray(a["embedding"]), np.asarray(b["embedding"])
            assert float(u @ v / np.linalg.norm(u) / np.linalg.norm(v)) >= 0.9999


def test_a_killed_replica_loses_nothing_and_duplicates_nothing(
    cluster, studio_home, tmp_path, default_model
):
    from core.config import data_paths
    from core.jobs.folder import create_job
    from core.run.ray_cluster import ray_settings
    from core.schemas import EngineConfig

    batch = _batch(tmp_path / "batch.jsonl", 32)
    job = create_job(
        batch,
        data_paths().jobs,
        EngineConfig(model=str(default_model)),
        chunk_size=2,
        ray=ray_settings(cluster.address, 2, 0, 1, {"slot": 1}),
    )
    worker = start_worker(job)
    try:
        victim = _replica_pid_once_results_flow(job, worker)
        os.kill(victim, signal.SIGKILL)
        assert worker.wait(timeout=420) == 0, JobFolder(job.path).log_tail(40)
    finally:
        if worker.poll() is None:
            worker.kill()
    report = reconcile(job)
    assert report.complete and report.succeeded == 32, report.to_dict()
    assert verify(job).ok
    assert job.read_status().state == "completed"


def _replica_pid_once_results_flow(job, worker, timeout=300.0):
    """A replica's process id, once both replicas are up and results are being written."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert worker.poll() is None, job.log_tail(40)
        stats = read_ray_stats(job.path) or {}
        pids = [r["pid"] for r in stats.get("replicas", []) if r.get("pid")]
        if len(pids) == 2 and 0 < job.read_status().done < 24:
            return pids[-1]
        time.sleep(0.2)
    raise AssertionError(f"no results within {timeout} s: {job.log_tail(40)}")
