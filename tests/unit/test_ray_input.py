"""A Ray job's input object read by its replicas (core/run/ray_input.py), without Ray: the
driver's part (what it keeps, where the lines are) and the replica's (ranged reads of the
object, checked into the same requests), against a local S3 server (moto)."""

from __future__ import annotations

import json

import pytest

from core.check import scan
from core.check.engine_requests import ChatRequest
from core.jobs.folder import create_job
from core.run import worker
from core.run.ray_input import REPLICA_AGENT, ObjectShard, input_spans, read_requests
from core.schemas import EngineConfig, JobDefaults, RaySettings
from core.storage.s3 import StorageError, stat
from tests.support.jobs import StandIn, request_line
from tests.support.s3 import BUCKET

SOURCE = f"s3://{BUCKET}/in/batch.jsonl"


def _batch(tmp_path, s3):
    """A batch with what moves byte offsets: a BOM, CRLF endings, blank lines, a repeated
    id, and a long line between (so two runs of lines are two ranged reads)."""
    lines = [
        "\ufeff" + request_line("a", "Say a.", max_tokens=4),
        request_line("b", "Say b, é.", max_tokens=5) + "\r",
        "",
        request_line("skipped", "x" * 100_000),
        request_line("c", "Say c.", system="Be brief."),
        request_line("a", "a repeated id"),
        "   ",
        request_line("d", "Say d."),
    ]
    path = tmp_path / "batch.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode())
    s3.put_object(Bucket=BUCKET, Key="in/batch.jsonl", Body=path.read_bytes())
    return path


def _shard(path, ids):
    spans = input_spans(path, set(ids))
    lines = sorted(((cid, *spans[cid]) for cid in ids), key=lambda line: line[1])
    return ObjectShard(source=SOURCE, etag=stat(SOURCE).etag, lines=lines)


def test_replicas_read_their_lines_by_ranged_gets_into_the_checked_requests(
    s3, s3_requests, tmp_path
):
    path = _batch(tmp_path, s3)
    defaults = JobDefaults(max_tokens=7, temperature=0.3)
    expected = {}
    for checked in scan(path, defaults):
        expected.setdefault(checked.custom_id, checked.request)  # a repeat is not the request
    del s3_requests[:]
    requests = read_requests(_shard(path, ["a", "b", "c", "d"]), defaults)
    assert [r.custom_id for r in requests] == ["a", "b", "c", "d"]
    assert requests == [expected[cid] for cid in "abcd"]  # the first "a", with the defaults
    gets = [r for r in s3_requests if r["method"] == "GET"]
    # Two runs of lines (the long line between is not read): two ranged GETs, no whole read.
    assert len(gets) == 2 and all(r["range"] and REPLICA_AGENT in r["agent"] for r in gets)


def test_a_replaced_missing_or_refused_object_is_said_in_words(s3, tmp_path, monkeypatch):
    from tests.support.s3 import _drop_bucket, _wrong_credentials

    path = _batch(tmp_path, s3)
    shard = _shard(path, ["a", "c"])
    s3.put_object(Bucket=BUCKET, Key="in/batch.jsonl", Body=path.read_bytes() + b"\n")
    with pytest.raises(StorageError, match="changed since the job was made"):
        read_requests(shard, JobDefaults())
    # Same bytes, no ETag asked for: a line that is not the request it was is refused too.
    s3.put_object(Bucket=BUCKET, Key="in/batch.jsonl", Body=b"\n" + path.read_bytes())
    with pytest.raises(StorageError, match=r"byte \d+ is no longer the request 'a'"):
        read_requests(shard.model_copy(update={"etag": None}), JobDefaults())
    with monkeypatch.context() as wrong:
        _wrong_credentials(wrong)
        with pytest.raises(StorageError, match=r"cannot read s3://batches/in/batch\.jsonl: access"):
            read_requests(shard, JobDefaults())
    _drop_bucket(s3)
    with pytest.raises(StorageError, match="the bucket 'batches' does not exist"):
        read_requests(shard, JobDefaults())


class _Driver(StandIn):
    """Stands in for the Ray executor: keeps what the worker hands it."""

    def __init__(self) -> None:
        self.requests = []

    def run(self, requests):
        from core.run.outputs import error_line

        self.requests = list(requests)  # read once, as an executor reads them
        yield [error_line(r.custom_id, "engine_error", "stand-in", 500) for r in self.requests]


def test_the_driver_of_a_ray_job_on_an_object_keeps_no_prompts(
    s3, studio_home, tmp_path, monkeypatch
):
    path = _batch(tmp_path, s3)
    ray = RaySettings(address="local", replicas=1)
    job = create_job(
        path, studio_home / "jobs", EngineConfig(model="/models/tiny"), source=SOURCE, ray=ray
    )
    driver = _Driver()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: driver)
    worker.run_job(job)
    assert [r.custom_id for r in driver.requests] == ["a", "b", "skipped", "c", "d"]
    assert all(isinstance(r, ChatRequest) for r in driver.requests)  # no prompt but messages
    kept = json.dumps([[r.messages, r.tools, r.json_schema] for r in driver.requests])
    assert "Say" not in kept and "xxx" not in kept and "Be brief" not in kept
    assert [r.max_tokens for r in driver.requests[:2]] == [4, 5]  # what the driver counts


def test_the_replicas_get_the_store_settings_through_their_runtime_env_only_when_needed(s3):
    from core.run.ray_cluster import replica_env

    settings, config = RaySettings(address="local"), EngineConfig(model="/models/tiny")
    env = replica_env(config, settings, storage=True)
    assert env["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
    assert env["AWS_ACCESS_KEY_ID"] == "testing" and env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert not any(name.startswith("AWS_") for name in replica_env(config, settings))
