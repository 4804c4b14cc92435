"""A Ray job's run window closing mid-pass (core/run/ray_cluster.py), without Ray: the
driver's watch closes the replicas' door as soon as the gate refuses, and a replica whose
door is closed starts no shard, handing each back as held (issue 42 item 3). The same on
a cluster: tests/ray/test_ray.py."""

from __future__ import annotations

import json
import threading
import time

from core.check.engine_requests import ChatRequest
from core.run import ray_cluster
from core.run.ray_cluster import Door, Replica, WindowWatch, request_to_dict, shard_size
from core.schemas import JobDefaults


def _replica(monkeypatch, ran: list[list[str]], door_open=None) -> Replica:
    """A replica as Ray builds one, its engine a stand-in; ``ran`` gets the custom_ids of
    each shard it runs. ``door_open()``: what its door answers before each shard (None: the
    job has no windows, and the replica has no door)."""

    def run_chunk(engine, requests, model):
        ran.append([r.custom_id for r in requests])
        return [{"custom_id": r.custom_id, "error": None} for r in requests]

    monkeypatch.setattr("core.run.retry.run_chunk", run_chunk)
    monkeypatch.setattr(ray_cluster, "_own_resources", lambda load_seconds: {})
    replica = Replica.__new__(Replica)  # no Ray, no engine
    replica.node_id, replica.replica_id, replica.model = "node-1", "actor-1", "m"
    replica.parts, replica.engine, replica.load_seconds = None, object(), 0.0
    replica.defaults = JobDefaults()
    replica.door = None
    if door_open is not None:
        replica.door = "the job's door"
        monkeypatch.setattr(replica, "_admitted", door_open)
    return replica


def _shard(*ids: str) -> str:
    requests = [ChatRequest(custom_id=i, messages=[], sampling={}) for i in ids]
    return json.dumps([request_to_dict(r) for r in requests])


def test_a_replica_starts_no_shard_once_its_door_closes(monkeypatch):
    answers = iter([True, False, False])  # the window closes after the first shard
    ran: list[list[str]] = []
    replica = _replica(monkeypatch, ran, lambda: next(answers))
    out = replica({"requests": [_shard("a", "b"), _shard("c", "d"), _shard("e")]})
    assert ran == [["a", "b"]]  # the shard it started finished; the others never ran
    assert out["held"] == [False, True, True]
    assert [[line["custom_id"] for line in json.loads(x)] for x in out["lines"]] == [
        ["a", "b"],
        [],
        [],
    ]
    assert out["problem"] == ["", "", ""]
    assert {len(column) for column in out.values()} == {3}  # one row per shard, every column


def test_a_replica_of_a_job_without_windows_asks_no_door(monkeypatch):
    ran: list[list[str]] = []
    replica = _replica(monkeypatch, ran)
    assert replica._admitted()  # no door: nothing asked (Ray is not even imported)
    out = replica({"requests": [_shard("a"), _shard("b")]})
    assert ran == [["a"], ["b"]] and out["held"] == [False, False]


def test_the_watch_closes_the_door_once_as_soon_as_the_gate_refuses():
    door, is_open = Door(), threading.Event()
    is_open.set()
    closes: list[float] = []

    def close() -> None:
        closes.append(time.monotonic())
        door.close()

    with WindowWatch(is_open.is_set, close, seconds=0.01) as watch:
        time.sleep(0.1)
        assert door.is_open() and not closes  # open: asked, nothing closed
        refused = time.monotonic()
        is_open.clear()  # the window closes mid-pass
        deadline = time.monotonic() + 5
        while not closes and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
    assert len(closes) == 1 and closes[0] - refused < 1  # once, within the poll's time
    assert not door.is_open() and watch.closed
    with WindowWatch(lambda: True, close, seconds=0.01) as watch:
        pass  # a pass that ends with its window open: the thread stops with it
    assert len(closes) == 1 and not watch.closed


def test_what_a_closing_window_leaves_running_is_bounded():
    """What a replica still runs once its window closes is the shard it started: at most
    the job's chunk size, else SHARD_REQUESTS, however long the pass."""
    assert shard_size(1_000_000, 2, None) == ray_cluster.SHARD_REQUESTS
    assert shard_size(1_000_000, 2, 16) == 16
    assert shard_size(32, 1, 2) == 2
