"""Issue 27, item 3: a studio on a machine that is not the head node follows a cluster job.

The other machine is a network namespace of this one, with its own address and its own
process table (``unshare --pid``): a Ray node with no CPUs joins the cluster from there,
as an analyst's machine would, and the studio's worker (Ray's driver) runs beside it, so
the job's progress, per-node rates and results reach the studio only from the cluster.
The cluster's two nodes (one ``slot`` each) listen on the other end of a veth pair; the
job runs one replica (a model loaded cold: a job spread over two nodes is
tests/ray/test_ray.py's), so one node works and Monitor shows the other idle. Making a
namespace needs root (with the admin capabilities) and ``ip``; without them the test is
skipped and says so.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from core.config import REPO_ROOT, data_paths  # noqa: E402
from core.jobs.folder import list_jobs  # noqa: E402
from core.jobs.ledger import reconcile  # noqa: E402
from core.run.ray_stats import read_ray_stats  # noqa: E402
from core.store.db import Store  # noqa: E402
from tests.support.ray import _batch  # noqa: E402

pytestmark = [
    pytest.mark.engine,
    pytest.mark.ray,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None,
        reason="a second machine is simulated by a network namespace: needs root, ip, unshare",
    ),
]
REQUESTS = 16


@dataclass
class Machines:
    """The cluster's side (``head``: its nodes' address) and the studio's namespace."""

    namespace: str
    head: str
    studio: str
    cluster: Cluster


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def machines() -> Iterator[Machines]:
    tag = os.getpid() % 10_000  # names and a subnet of this test run's own
    namespace, here, there = f"bs_studio{tag}", f"bsh{tag}", f"bss{tag}"
    subnet = f"10.213.{tag % 250}"
    head, studio = f"{subnet}.1", f"{subnet}.2"
    os.environ["RAY_AUTH_MODE"] = "disabled"  # ray start turns token auth on in 2.60
    made = subprocess.run(["ip", "netns", "add", namespace], capture_output=True, text=True)
    if made.returncode != 0:  # a container without CAP_SYS_ADMIN and CAP_NET_ADMIN
        pytest.skip(f"cannot make a network namespace here: {made.stderr.strip()}")
    cluster = None
    try:
        _ip("link", "add", here, "type", "veth", "peer", "name", there)
        _ip("link", "set", there, "netns", namespace)
        _ip("addr", "add", f"{head}/24", "dev", here)
        _ip("link", "set", here, "up")
        for args in (("addr", "add", f"{studio}/24", "dev", there), ("link", "set", there, "up")):
            _ip("netns", "exec", namespace, "ip", *args)
        _ip("netns", "exec", namespace, "ip", "link", "set", "lo", "up")
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"node_ip_address": head, "num_cpus": 1, "resources": {"slot": 1}},
        )
        cluster.add_node(node_ip_address=head, num_cpus=1, resources={"slot": 1})
        cluster.wait_for_nodes()
        yield Machines(namespace, head, studio, cluster)
    finally:
        if cluster is not None:
            cluster.shutdown()
        subprocess.run(["ip", "link", "del", here], capture_output=True)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def test_a_studio_off_the_head_node_follows_the_job_from_the_cluster(
    machines, studio_home, tmp_path, default_model
):
    batch = _batch(tmp_path / "batch.jsonl", REQUESTS)
    port = machines.cluster.address.rsplit(":", 1)[1]
    run = [
        sys.executable, "-m", "core", "run", str(batch), "-o", str(tmp_path / "out.jsonl"),
        "--model", str(default_model), "--chunk-size", "2",
        "--ray", f"{machines.head}:{port}", "--replicas", "1", "--replica-resources",
        json.dumps({"slot": 1}),
    ]  # fmt: skip
    # The studio's machine: its own Ray node (no CPUs: no work there), then the job. When
    # the shell ends, the namespace's first process, the kernel ends the rest of it.
    join = [
        Path(sys.executable).parent / "ray", "start", "--address", f"{machines.head}:{port}",
        "--node-ip-address", machines.studio, "--num-cpus", "0", "--num-gpus", "0",
        "--disable-usage-stats",
    ]  # fmt: skip
    script = f"{shlex.join(map(str, join))} >/dev/null && {shlex.join(run)}"
    studio = subprocess.Popen(
        ["ip", "netns", "exec", machines.namespace, "unshare", "--pid", "--fork",
         "--kill-child", "--mount-proc", "bash", "-c", script],
        cwd=REPO_ROOT, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    store = Store(tmp_path / "studio.duckdb")  # the studio's pages read results from here
    arrived = [0]  # results in the store after each look while the job runs
    monitor = None  # Monitor's node table, once results have begun to arrive
    try:
        deadline = time.monotonic() + 600
        while studio.poll() is None and time.monotonic() < deadline:
            jobs = list_jobs(data_paths().jobs)
            if jobs and jobs[0].read_status().state == "running":
                arrived.append(arrived[-1] + store.ingest(jobs[0]))
                if monitor is None and 0 < arrived[-1] < REQUESTS:  # as a person looks
                    monitor = node_table(jobs[0].job_id)
            time.sleep(1.0)
        output = studio.communicate(timeout=60)[0]
    finally:
        if studio.poll() is None:
            studio.kill()
    assert studio.returncode == 0, output[-4000:]
    (job,) = list_jobs(data_paths().jobs)
    report = reconcile(job)
    assert report.complete and report.succeeded == REQUESTS, report.to_dict()
    # Results reached the studio's store as shards finished, before the job ended.
    assert any(0 < count < REQUESTS for count in arrived), arrived
    assert arrived[-1] + store.ingest(job) == REQUESTS  # each result indexed once

    stats = read_ray_stats(job.path)
    nodes = {n["node_id"]: n for n in stats["nodes"]}
    assert sorted(n["address"] for n in nodes.values()) == [machines.head] * 2 + [machines.studio]
    # Every result came from the cluster's nodes, none from the studio's, and each node's
    # share and rate are there for Monitor's node table.
    worked = {n["address"] for n in nodes.values() if n.get("done")}
    assert worked == {machines.head}
    assert sum(n.get("done", 0) for n in nodes.values()) == REQUESTS
    assert all(n["rows_per_s"] > 0 for n in nodes.values() if n.get("done"))
    lines = [json.loads(line) for line in job.output.read_text().splitlines()]
    assert {nodes[line["node_id"]]["address"] for line in lines} == {machines.head}
    # Monitor, mid-job, showed the three nodes, alive, and work done on the cluster's side.
    assert monitor is not None, arrived
    assert sorted(monitor["address"]) == [machines.head] * 2 + [machines.studio]
    assert monitor["alive"].all()
    assert monitor.groupby("address")["done"].sum()[machines.head] > 0


def node_table(job_id: str) -> pd.DataFrame:
    """Monitor's table of the job's nodes, as the studio's page shows it now."""
    from tests.support.pages import open_page

    at = open_page("monitor.py", job_id=job_id)
    return next(d.value for d in at.dataframe if "alive" in d.value.columns)
