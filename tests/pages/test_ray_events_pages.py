"""The pages tests of tests/unit/test_ray_events.py (split from it by kind; docs/tests.md).

What a Ray job's stats make of the cluster changing under it (no cluster: Ray's answers
are given, NVML's on a GPU node too), and what Monitor and Jobs show of it."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
from tests.support.jobs import finished_job  # noqa: E402
from tests.support.ray_events import LOST, SPARE, _stats  # noqa: E402


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
