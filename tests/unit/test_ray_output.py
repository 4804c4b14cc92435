"""A Ray job's results in object storage without Ray: the parts its replicas write, the
acknowledgements the driver keeps, and the output object assembled from the job folder,
against a local S3 server (moto). The engine runs of the same are in tests/ray/test_ray.py."""

from __future__ import annotations

import json
import re

import pytest

from core.jobs.delivery import deliver, parts_prefix
from core.jobs.folder import JobFolder
from core.jobs.output_file import OutputWriter
from core.run.ray_output import AckLedger, acked_without_line, read_part, write_part
from core.storage.s3 import upload_stream
from tests.support.jobs import request_line
from tests.support.s3 import BUCKET, small_parts


def _result(cid: str, answer: str) -> dict:
    return {
        "id": f"batch_req_{cid}",
        "custom_id": cid,
        "response": {"answer": answer},
        "error": None,
    }


def test_the_output_object_goes_up_in_parts_of_the_size_asked_holding_a_few_parts_at_most(
    s3, s3_requests, monkeypatch
):
    part_bytes = 16 << 10
    small_parts(monkeypatch, part_bytes)  # S3's rule, scaled down
    lines = [json.dumps(_result(f"r{i}", "é" * (i % 50))).encode() + b"\n" for i in range(4000)]
    held = []  # bytes made but not yet in the store, each time a line is asked for

    def stream():
        made = 0
        for line in lines:
            stored = sum(r["size"] for r in s3_requests if "partNumber" in r["query"])
            held.append(made - stored)
            made += len(line)
            yield line

    size = upload_stream(stream(), f"s3://{BUCKET}/out.jsonl", part_bytes, in_flight=2)
    body = s3.get_object(Bucket=BUCKET, Key="out.jsonl")["Body"].read()
    assert body == b"".join(lines) and size == len(body)
    # by part number: parts go up side by side, so the log's order is not theirs
    parts = [r for r in s3_requests if "partNumber" in r["query"]]
    parts.sort(key=lambda r: int(re.search(r"partNumber=(\d+)", r["query"]).group(1)))
    uploaded = [r["size"] for r in parts]
    longest = max(map(len, lines))
    assert len(uploaded) > 10 and sum(uploaded) == len(body)
    assert all(part_bytes <= n < part_bytes + longest for n in uploaded[:-1])  # S3's minimum
    # Two parts on their way and one filling, never the whole output.
    assert max(held) < 3 * (part_bytes + longest) < len(body) // 10


def test_a_small_output_object_goes_up_in_one_put(s3, s3_requests):
    upload_stream(iter([b"a\n", b"b\n"]), f"s3://{BUCKET}/small.jsonl")
    assert s3.get_object(Bucket=BUCKET, Key="small.jsonl")["Body"].read() == b"a\nb\n"
    assert not [r for r in s3_requests if "uploads" in r["query"]]


@pytest.fixture
def half_run_job(tmp_path):
    """A job of four requests whose folder holds r2's result only."""
    job = JobFolder(tmp_path / "job-1")
    job.path.mkdir()
    job.input.write_text("".join(request_line(f"r{i}", "hi") + "\n" for i in range(4)))
    with OutputWriter(job.output) as out:
        out.write([_result("r2", "kept")])
    return job


def test_a_request_acknowledged_twice_keeps_its_first_and_unacknowledged_parts_are_not_read(
    s3, half_run_job
):
    job, prefix = half_run_job, parts_prefix(f"s3://{BUCKET}/out.jsonl", "job-1")
    first = write_part(prefix, [_result("r0", "first"), _result("r1", "first")])
    again = write_part(prefix, [_result("r1", "again"), _result("r2", "again")])
    write_part(prefix, [_result("r3", "dead replica")])  # written, never acknowledged
    acks = AckLedger(job.acks)
    acks.append(first)
    acks.append(again)
    with job.acks.open("ab") as out:
        out.write(b'{"part": "s3://batches/torn')  # a driver killed as it wrote
    found = acked_without_line(job.path, {"r0", "r1", "r2", "r3"})
    lines = [line for ack in found for line in read_part(ack)]
    # r1 keeps its first answer; r2 has its line in the folder; r3 was never acknowledged.
    assert [(line["custom_id"], line["response"]["answer"]) for line in lines] == [
        ("r0", "first"),
        ("r1", "first"),
    ]


def test_delivering_a_job_removes_the_parts_its_replicas_wrote(s3, half_run_job):
    job, target = half_run_job, f"s3://{BUCKET}/out.jsonl"
    AckLedger(job.acks).append(write_part(parts_prefix(target, "job-1"), [_result("r2", "x")]))
    deliver(job, target)
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="out.")
    keys = [o["Key"] for o in listed.get("Contents", [])]
    assert sorted(keys) == ["out.errors.jsonl", "out.jsonl"]
    assert (
        json.loads(s3.get_object(Bucket=BUCKET, Key="out.jsonl")["Body"].read())["custom_id"]
        == "r2"
    )


def test_a_bucket_gone_during_the_upload_fails_it_naming_the_object(s3, monkeypatch):
    from core.storage.s3 import StorageError
    from tests.support.s3 import _drop_bucket

    small_parts(monkeypatch, 1024)

    def stream():
        for i in range(200):
            if i == 100:  # a few parts are in by now
                _drop_bucket(s3)
            yield b"x" * 99 + b"\n"

    with pytest.raises(
        StorageError, match=r"cannot write s3://batches/out\.jsonl: the bucket .batches. does not"
    ):
        upload_stream(stream(), f"s3://{BUCKET}/out.jsonl", 1024, in_flight=2)
