"""The Ray executor on a two-node Ray cluster simulated on this machine (real engine, CPU).

Each node has one CPU and a custom resource ``slot``; a replica asks for one of each, so
the two replicas land on different nodes. The cluster is started once for the module
(seconds, and about 6 GB with two engines) and always shut down; every test here shares
it (a node lost, and a studio off the head node, have their own: test_ray_nodes.py and
test_ray_remote_studio.py).

Each replica loads the model cold in a process of its own, so a job asks for two only
where a test's assertion needs two (both nodes worked; a killed replica's shard ran again
on the other); a job whose point is what a failure says, or what a resume keeps, runs
one. The local runs the cluster's answers are compared with run on the test run's warm
engine (tests/support/warm_engine.py: the same engine code and model, its model loaded
once per pytest process), with the same shards of two as the cluster's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager, suppress

import pytest

from tests.support.ray import _batch

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from core.config import REPO_ROOT  # noqa: E402
from core.jobs.folder import JobFolder, list_jobs, start_worker  # noqa: E402
from core.jobs.ledger import reconcile, verify  # noqa: E402
from core.run import ray_stats  # noqa: E402
from core.run.ray_input import REPLICA_AGENT  # noqa: E402
from core.run.ray_stats import read_ray_stats  # noqa: E402
from tests.support.cli import cli, run_cli  # noqa: E402
from tests.support.warm_engine import use_warm_home  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.ray]  # one worker runs the cluster tests in turn


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


def test_each_gpu_node_is_asked_for_its_devices_on_the_node(cluster):
    """A node declaring one GPU joins the module's cluster: the reading runs on that node
    and answers what NVML finds there (no device on a machine without a driver); the CPU
    nodes are not asked. A reading that misses (the node slow to start a worker) is left
    out; the next poll's gets it."""
    from core.run.monitoring import ResourceSampler

    gpu_node = cluster.add_node(num_cpus=1, num_gpus=1)  # no slot: no replica goes there
    ray.init(address=cluster.address)
    try:
        cluster.wait_for_nodes()
        nodes = [n for n in ray.nodes() if n["Alive"]]
        assert gpu_node.node_id in {n["NodeID"] for n in nodes}
        readings = [ray_stats._node_devices(nodes)]
        deadline = time.monotonic() + 120  # a reading may miss while the node starts a worker
        while not readings[-1] and time.monotonic() < deadline:
            readings.append(ray_stats._node_devices(nodes))
        assert readings[-1] == {gpu_node.node_id: ResourceSampler().sample()["gpus"]}
        cpu_only = [{**n, "Resources": {"CPU": 1.0}} for n in nodes]
        assert ray_stats._node_devices(cpu_only) == {}  # CPU nodes are not asked
    finally:
        ray.shutdown()
        cluster.remove_node(gpu_node)  # the other tests' jobs see the two nodes


def test_the_stats_ask_the_state_api_of_the_cluster_the_driver_is_on(cluster, monkeypatch):
    """A driver's replica states are asked of its own cluster, by the GCS address Ray gives
    the driver (not of the latest Ray instance on this machine: Ray ended a job's worker
    once that one was gone); where the state API does not answer (these clusters serve no
    dashboard), the GCS table gives them."""
    from ray.util import state

    asked = []
    ask = state.list_actors

    def spy(**kwargs):
        asked.append(kwargs["address"])
        return ask(**kwargs)

    monkeypatch.setattr(state, "list_actors", spy)
    ray.init(address=cluster.address)
    try:
        assert ray_stats._replica_actors() == []  # this driver has no replicas
    finally:
        ray.shutdown()
    assert asked == [cluster.address]


def _ray_args(cluster):
    return ["--ray", cluster.address, "--replicas", "2", "--replica-resources", '{"slot": 1}']


def _lines(path):
    return {
        line["custom_id"]: line
        for line in map(json.loads, path.read_text(encoding="utf-8").splitlines())
    }


@pytest.fixture(scope="module")
def run_here(warm_engine_home, warm_engine_env):
    """Runs a batch on this machine's engine, the test run's warm one, in shards of two as
    on the cluster; gives its output lines by custom_id."""

    def run(batch, out):
        with pytest.MonkeyPatch.context() as env:
            use_warm_home(env, warm_engine_home, warm_engine_env)
            local = cli("run", str(batch), "-o", str(out), "--chunk-size", "2", "--no-reuse")
        assert local.returncode == 0, local.stderr[-2000:]
        return _lines(out)

    return run


@pytest.fixture(scope="module")
def chats_run_here(tmp_path_factory, run_here, default_model):
    """32 chats (:func:`_batch`) and their output lines run on this machine's engine,
    once for the tests that compare a run on the cluster with it."""
    folder = tmp_path_factory.mktemp("chats-here")
    batch = _batch(folder / "batch.jsonl", 32)
    return batch, run_here(batch, folder / "local.jsonl")


def _on_ray(cluster, batch, tmp_path):
    """The output lines of ``batch`` run on the cluster, by custom_id: every request
    computed there (``--no-reuse``: a local run of the same file may be in the home)."""
    ray_out = tmp_path / "ray.jsonl"
    on_ray = run_cli(
        "run", str(batch), "-o", str(ray_out), "--chunk-size", "2", "--no-reuse",
        *_ray_args(cluster),
    )  # fmt: skip
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    return _lines(ray_out)


def test_an_embeddings_job_spreads_over_two_nodes_and_matches_a_local_run(
    cluster, studio_home, tmp_path, run_here
):
    import numpy as np

    batch = tmp_path / "embed.jsonl"
    with batch.open("w") as out:
        for i in range(8):
            body = {"model": "text-embedding-3-small", "input": [f"Ticket {i}", f"Refund {i}"]}
            line = {"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings"}
            out.write(json.dumps({**line, "body": body}) + "\n")
    local_lines = run_here(batch, tmp_path / "local.jsonl")
    ray_lines = _on_ray(cluster, batch, tmp_path)
    assert list(ray_lines) == [f"e{i}" for i in range(8)]
    node_ids = {node.node_id for node in cluster.list_all_nodes()}
    assert {line["node_id"] for line in ray_lines.values()} == node_ids  # both nodes worked
    for cid, line in ray_lines.items():
        ours, theirs = line["response"]["body"], local_lines[cid]["response"]["body"]
        assert ours["usage"] == theirs["usage"] and len(ours["data"]) == 2
        for a, b in zip(ours["data"], theirs["data"], strict=True):
            u, v = np.asarray(a["embedding"]), np.asarray(b["embedding"])
            assert float(u @ v / np.linalg.norm(u) / np.linalg.norm(v)) >= 0.9999


@contextmanager
def _running_job(cluster, batch, default_model, replicas=2, **where):
    """A job of ``batch`` on the cluster (``replicas``, shards of two; ``where``: its
    ``source`` or ``output_path`` in object storage) and its started worker, killed if the
    test leaves before it ends."""
    from core.config import data_paths
    from core.jobs.folder import create_job
    from core.run.ray_cluster import ray_settings
    from core.schemas import EngineConfig

    job = create_job(
        batch,
        data_paths().jobs,
        EngineConfig(model=str(default_model)),
        chunk_size=2,
        ray=ray_settings(cluster.address, replicas, 0, 1, {"slot": 1}),
        **where,
    )
    worker = start_worker(job)
    try:
        yield job, worker
    finally:
        if worker.poll() is None:
            worker.kill()


def _replica_pid_once_results_flow(job, process, replicas=2, before=24, but=(), timeout=300.0):
    """A replica's process id, once each of the job's ``replicas`` (those of this run: a
    pid in ``but`` is an earlier run's) has written results and fewer than ``before`` of
    its 32 requests are done (the rest are still to run). ``process`` is the job's worker,
    or the command following it: it must still run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, job.log_tail(40)
        stats = read_ray_stats(job.path) or {}
        wrote = [
            r["pid"]
            for r in stats.get("replicas", [])
            if r.get("pid") and r.get("done") and r["pid"] not in but
        ]
        if len(wrote) == replicas and 0 < job.read_status().done < before:
            return wrote[-1]
        time.sleep(0.2)
    raise AssertionError(f"no results within {timeout} s: {job.log_tail(40)}")


def _how_it_ended(result, job) -> str:
    """What a ``core resume`` that did not succeed said, and what its job's worker left: the
    CLI's stderr gives only the status message of a job it found interrupted, whereas
    whether the worker still runs (a heartbeat older than 30 s) or died, and its log,
    tell which it was."""
    from core.schemas import worker_alive

    status = job.read_status()
    alive = status.pid is not None and worker_alive(status.pid)
    age = time.time() - status.heartbeat_at if status.heartbeat_at else None
    log = job.log_file.read_text(errors="replace") if job.log_file.exists() else ""
    own = [line for line in log.splitlines() if "(MapWorker" not in line]  # not the replicas'
    return "\n".join(
        [
            f"exit {result.returncode}; stdout: {result.stdout[-1500:]}",
            f"stderr: {result.stderr[-3000:]}",
            f"status {status.state}, worker pid {status.pid} alive: {alive}, "
            f"heartbeat {age} s ago, history {status.history[-4:]}",
            "the worker's own log lines:",
            *own[-40:],
        ]
    )


# -- input and output in object storage -------------------------------------------------------


def _input_reads(requests, key):
    return [r for r in requests if r["method"] == "GET" and r["path"] == f"/batches/{key}"]


def _driver_uploads(requests):
    """The keys the studio's side (not a replica) sent a body to (removing objects aside)."""
    return {
        r["path"]
        for r in requests
        if r["method"] in ("PUT", "POST")
        and REPLICA_AGENT not in r["agent"]
        and "delete" not in r["query"]
    }


def _keys(client, prefix):
    return [
        o["Key"]
        for o in client.list_objects_v2(Bucket="batches", Prefix=prefix).get("Contents", [])
    ]


def _object_lines(client, key):
    body = client.get_object(Bucket="batches", Key=key)["Body"].read().decode()
    return [json.loads(line) for line in body.splitlines()]


@contextmanager
def _core_run(jobs, tmp_path, *args):
    """``python -m core run ARGS`` as a user runs it, in its own process, with this test's
    environment, and the Ray job it made once it is there; the command and the job's
    worker are killed if the test leaves before they end."""
    out, err = tmp_path / "run.out", tmp_path / "run.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        command = subprocess.Popen(
            [sys.executable, "-m", "core", "run", *args],
            cwd=REPO_ROOT,
            env=os.environ.copy(),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            text=True,
        )
    job = None
    try:
        deadline = time.monotonic() + 120
        while job is None:
            assert command.poll() is None, err.read_text()[-3000:]
            assert time.monotonic() < deadline, f"no job after 120 s: {err.read_text()[-3000:]}"
            job = next((j for j in list_jobs(jobs) if j.read_spec().ray), None)
            time.sleep(0.2)
        yield job, command, err
    finally:
        if command.poll() is None:
            command.kill()
        pid = job.read_status().pid if job is not None else None
        if pid is not None and job.read_status().state == "running":
            with suppress(ProcessLookupError):  # the worker, left by its follower's end
                os.killpg(pid, signal.SIGKILL)


def test_an_object_job_spreads_over_two_nodes_matches_a_local_run_and_survives_a_killed_replica(
    cluster, studio_home, tmp_path, chats_run_here, s3, s3_requests
):
    """One job from an input object to an output object on two replicas, one per node: it
    gives the local run's answers, and one of its replicas, killed while it writes parts
    (once both have written results), loses nothing and repeats nothing; its shard runs
    again (Ray restarts it). The store's log shows who read and wrote what. (A replica lost
    with its node, results written here: tests/ray/test_ray_nodes.py.)"""
    from core.run.ray_output import AckLedger

    batch, local_lines = chats_run_here
    ids = [f"r{i}" for i in range(32)]
    s3.put_object(Bucket="batches", Key="in/batch.jsonl", Body=batch.read_bytes())
    args = ("s3://batches/in/batch.jsonl", "-o", "s3://batches/out/ray.jsonl")
    args += ("--chunk-size", "2", *_ray_args(cluster))
    with _core_run(studio_home / "jobs", tmp_path, *args) as (job, on_ray, err):
        # Both nodes have written and a shard is still to run: not fewer than 24 done, as
        # on a busy machine one replica may start tens of seconds after the other.
        victim = _replica_pid_once_results_flow(job, on_ray, before=30)
        os.kill(victim, signal.SIGKILL)
        assert on_ray.wait(timeout=600) == 0, err.read_text()[-3000:]
    status = job.read_status()
    assert status.state == "completed" and status.delivered_to == "s3://batches/out/ray.jsonl"
    ray_lines = _object_lines(s3, "out/ray.jsonl")
    # One line per custom_id, the local run's answers, from both nodes.
    assert [line["custom_id"] for line in ray_lines] == ids
    for line in ray_lines:
        ours, theirs = line["response"]["body"], local_lines[line["custom_id"]]["response"]["body"]
        assert line["error"] is None
        assert ours["choices"][0]["message"] == theirs["choices"][0]["message"]
        assert ours["usage"] == theirs["usage"]
        assert line["latency_ms"] > 0  # replicas time their requests as the local engine does
    node_ids = {node.node_id for node in cluster.list_all_nodes()}
    assert {line["node_id"] for line in ray_lines} == node_ids  # both nodes worked
    # The store's log: the submission's check read the object once, streamed, before the
    # job existed; from then on only the replicas read it, a byte range per shard.
    made = job.spec_file.stat().st_mtime
    reads = _input_reads(s3_requests, "in/batch.jsonl")
    before, after = [r for r in reads if r["at"] < made], [r for r in reads if r["at"] >= made]
    assert len(before) == 1 and before[0]["range"] is None
    assert len(after) >= 16, after  # 32 requests in shards of 2
    assert all(r["range"] and REPLICA_AGENT in r["agent"] for r in after), after
    acked = {cid for ack in AckLedger(job.acks).first(set(ids)) for cid, _, _ in ack.lines}
    assert acked == set(ids)  # every request's part acknowledged
    report = reconcile(job)
    assert report.complete and report.succeeded == 32, report.to_dict()
    assert verify(job).ok
    stats = read_ray_stats(job.path)
    assert {n["node_id"] for n in stats["nodes"] if n.get("done")} == node_ids
    assert sum(r["done"] for r in stats["replicas"] if "done" in r) == 32
    # The results: the replicas wrote them to parts; the driver uploaded only the output
    # object and its error file, assembled at the end, then removed the parts (those of
    # the killed replica's shard too).
    parts = [r for r in s3_requests if r["method"] == "PUT" and ".parts/" in r["path"]]
    assert len(parts) >= 16 and all(REPLICA_AGENT in r["agent"] for r in parts), parts
    assert all(r["path"].startswith(f"/batches/out/ray.jsonl.parts/{job.job_id}/") for r in parts)
    assert _driver_uploads([r for r in s3_requests if r["at"] >= made]) == {
        "/batches/out/ray.jsonl",
        "/batches/out/ray.errors.jsonl",
    }
    assert not _keys(s3, "out/ray.jsonl.parts/")


def test_an_input_bucket_gone_mid_job_fails_in_words_and_resume_completes(
    cluster, studio_home, tmp_path, default_model, s3, monkeypatch
):
    from tests.support.s3 import _drop_bucket, _wrong_credentials

    batch = _batch(tmp_path / "batch.jsonl", 32)
    s3.put_object(Bucket="batches", Key="in.jsonl", Body=batch.read_bytes())
    where = {"source": "s3://batches/in.jsonl"}
    with _running_job(cluster, batch, default_model, replicas=1, **where) as (job, worker):
        _replica_pid_once_results_flow(job, worker, replicas=1)
        _drop_bucket(s3)
        assert worker.wait(timeout=420) == 1, JobFolder(job.path).log_tail(40)
    status = job.read_status()
    assert status.state == "failed", status
    # Objects go before their bucket: a replica may find either gone.
    assert "cannot read s3://batches/in.jsonl: " in (status.error or ""), status.error
    assert "the bucket 'batches' does not exist" in status.error or "no object" in status.error
    kept = reconcile(job)
    assert 0 < kept.succeeded < 32 and not kept.failed, kept.to_dict()  # nothing lost
    s3.create_bucket(Bucket="batches")
    s3.put_object(Bucket="batches", Key="in.jsonl", Body=batch.read_bytes())
    with monkeypatch.context() as wrong:  # wrong credentials: refused in words, nothing lost
        _wrong_credentials(wrong)
        refused = run_cli("resume", job.job_id, timeout=600)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "cannot read s3://batches/in.jsonl: access denied" in job.read_status().error
    assert reconcile(job).succeeded == kept.succeeded
    resumed = run_cli("resume", job.job_id, timeout=600)
    assert resumed.returncode == 0, _how_it_ended(resumed, job)
    report = reconcile(job)
    assert report.complete and report.succeeded == 32, report.to_dict()
    assert verify(job).ok


# -- the driver lost ------------------------------------------------------------------------


def test_a_killed_driver_resumes_then_an_output_bucket_gone_fails_in_words_and_loses_nothing(
    cluster, studio_home, tmp_path, default_model, s3
):
    """A job to an output object on one replica. Its worker (Ray's driver, on the head node)
    killed mid-job: Ray ends its replica; the job's resume, what Resume on Jobs does, goes
    on. The output's bucket dropped while that resume writes parts: the job fails, saying
    which object and why, and keeps every result it had. The bucket back, a resume runs
    the rest: each request once, three runs counted. (A replica, not its driver, killed:
    the object job above; a node lost: tests/ray/test_ray_nodes.py.)"""
    from tests.support.s3 import _drop_bucket

    batch = _batch(tmp_path / "batch.jsonl", 32)
    ids = [f"r{i}" for i in range(32)]
    where = {"output_path": "s3://batches/out.jsonl"}
    with _running_job(cluster, batch, default_model, replicas=1, **where) as (job, worker):
        first = _replica_pid_once_results_flow(job, worker, replicas=1, before=12)
        os.killpg(worker.pid, signal.SIGKILL)  # the driver dies; Ray ends its replica
        worker.wait(timeout=30)
    written = job.read_status().done
    assert 0 < written < 32
    resumed = start_worker(job)
    try:
        _replica_pid_once_results_flow(job, resumed, replicas=1, but={first})
        _drop_bucket(s3)
        assert resumed.wait(timeout=420) == 1, JobFolder(job.path).log_tail(60)
    finally:
        if resumed.poll() is None:
            resumed.kill()
    status = job.read_status()
    assert status.state == "failed", status
    # A replica's part, or the driver's read of one, names the object and why.
    assert f"s3://batches/out.jsonl.parts/{job.job_id}/" in (status.error or ""), status.error
    assert "the bucket 'batches' does not exist" in status.error or "no object" in status.error
    assert "Traceback" not in status.error
    kept = reconcile(job)
    assert 0 < kept.succeeded < 32 and not kept.failed, kept.to_dict()  # nothing lost
    s3.create_bucket(Bucket="batches")
    resumed = run_cli("resume", job.job_id, timeout=600)
    assert resumed.returncode == 0, _how_it_ended(resumed, job)
    assert [line["custom_id"] for line in _object_lines(s3, "out.jsonl")] == ids
    done = [json.loads(line)["custom_id"] for line in job.output.read_text().splitlines()]
    assert sorted(done) == sorted(ids)  # none twice, none missing
    report = reconcile(job)
    assert report.complete and report.succeeded == 32, report.to_dict()
    assert verify(job).ok
    status = job.read_status()
    assert status.state == "completed" and status.runs == 3


# -- run windows --------------------------------------------------------------------------------


def test_a_window_closing_mid_pass_pauses_the_job_and_it_resumes_when_it_opens(
    cluster, studio_home, tmp_path, default_model, monkeypatch
):
    """A job on one replica, in shards of two, its window daily 20:00-22:00: the window
    closes once results flow (the clock moved to 22:00, the worker run here to keep the
    clock). The replica finishes the shard it runs and starts no other: the job goes back
    to the queue paused with fewer than all results (before, the pass ran all 32), and when
    the window opens the next day it completes by itself, each request once. (Without
    Ray: tests/unit/test_ray_windows.py.)"""
    import threading
    from datetime import datetime, timedelta

    from core.config import data_paths
    from core.jobs.folder import create_job, queue_job
    from core.jobs.windows import Clock
    from core.run import worker
    from core.run.ray_cluster import ray_settings
    from core.schemas import EngineConfig
    from tests.support.jobs import rewrite_spec

    job = create_job(
        _batch(tmp_path / "batch.jsonl", 32),
        data_paths().jobs,
        EngineConfig(model=str(default_model)),
        chunk_size=2,
        ray=ray_settings(cluster.address, 1, 0, 1, {"slot": 1}),
    )
    rewrite_spec(
        job, run_windows="daily 20:00-22:00", run_windows_zone="UTC", completion_window_hours=None
    )
    queue_job(job)

    class Closing(Clock):
        """Monday 20:00 until the test moves it; each of the worker's waits, 15 min on."""

        moment = datetime.fromisoformat("2026-12-07T20:00+00:00")
        paused = None

        def now(self):
            return self.moment

        def sleep(self, seconds):
            if self.paused is None:  # the first wait: the window's close paused the job
                self.paused = job.read_status()
            self.moment += timedelta(minutes=15)

    clock, seen = Closing(), []

    def close_once_results_flow():
        deadline = time.monotonic() + 400
        while job.read_status().done < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.append(job.read_status().done)
        clock.moment = datetime.fromisoformat("2026-12-07T22:00+00:00")  # the window closes

    monkeypatch.setattr(worker, "idle_seconds", lambda home: 0.0, raising=False)
    closer = threading.Thread(target=close_once_results_flow, daemon=True)
    closer.start()
    status = worker.serve(job, clock=clock)
    closer.join(timeout=5)
    paused = clock.paused
    assert paused is not None, job.log_tail(40)
    assert paused.state == "queued" and paused.paused_at == "2026-12-07T22:00:00+00:00"
    assert seen[0] <= paused.done < 32, (seen, paused.done)  # the rest waited: not run
    assert status.state == "completed" and status.runs == 2, job.log_tail(40)
    ids = [json.loads(line)["custom_id"] for line in job.output.read_text().splitlines()]
    assert sorted(ids) == sorted(f"r{i}" for i in range(32))  # each once, none missing
    report = reconcile(job)
    assert report.complete and report.succeeded == 32, report.to_dict()
