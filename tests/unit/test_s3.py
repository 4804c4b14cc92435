"""Object storage in and out (``s3://``), against a local S3 server (moto) the tests start.

The fast tests drive core/storage/s3.py, the delivery of a job's results and the worker
that delivers them; the one marked ``engine`` runs ``core run s3://... -o s3://...`` on the
real engine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.config import REPO_ROOT
from core.files import file_sha256
from core.jobs.delivery import deliver, errors_beside
from core.jobs.ledger import write_combined
from core.storage.s3 import S3Location, StorageError, fetch, put
from tests.support.browser import free_port
from tests.support.cli import cli
from tests.support.jobs import finished_job, request_line
from tests.support.s3 import BUCKET, _drop_bucket, _object, _wrong_credentials


def test_uris_name_a_bucket_and_key_and_malformed_ones_are_refused_in_words():
    location = S3Location.parse("s3://bucket/runs/march/in.jsonl")
    assert (location.bucket, location.key) == ("bucket", "runs/march/in.jsonl")
    assert errors_beside("s3://b/runs/out.jsonl") == "s3://b/runs/out.errors.jsonl"
    assert errors_beside("s3://b/v1.2/out") == "s3://b/v1.2/out.errors.jsonl"
    assert errors_beside("/tmp/out.jsonl") == "/tmp/out.errors.jsonl"
    for bad in ("s3://", "s3://bucket", "s3://bucket/", "/local/file.jsonl"):
        with pytest.raises(ValueError, match=r"s3://bucket/key\.jsonl"):
            S3Location.parse(bad)


def test_an_object_is_fetched_and_written_back_streamed(s3, tmp_path):
    # 24 MiB of lines, fetched by a process of its own (this one holds the server and its
    # copy). A one-line object first: what the fetch holds beyond that (boto3's client
    # and models) is a few MiB of transfer buffers, never the object whole.
    line = (request_line("x", "p" * 900) + "\n").encode()
    size = len(line) * (24 * 2**20 // len(line))
    s3.put_object(Bucket=BUCKET, Key="in/big.jsonl", Body=line * (size // len(line)))
    s3.put_object(Bucket=BUCKET, Key="in/one.jsonl", Body=line)
    code = (
        "import gc, sys, tracemalloc; from pathlib import Path\n"
        "from core.jobs.uploads import fetch_upload\n"
        "def peak(name):\n"
        "    gc.collect(); tracemalloc.reset_peak(); before = tracemalloc.get_traced_memory()[0]\n"
        "    path = fetch_upload(Path(sys.argv[1]), sys.argv[2] + name)\n"
        "    return path, tracemalloc.get_traced_memory()[1] - before\n"
        "tracemalloc.start(); peak('one.jsonl')\n"
        "_, small = peak('one.jsonl')\n"
        "path, big = peak('big.jsonl')\n"
        "from core.storage.s3 import put\n"  # and back, from the file: a multipart upload
        "def sent(source, name):\n"
        "    gc.collect(); tracemalloc.reset_peak(); before = tracemalloc.get_traced_memory()[0]\n"
        "    put(source, sys.argv[2] + name)\n"
        "    return tracemalloc.get_traced_memory()[1] - before\n"
        "one = sent(Path(sys.argv[1]) / 'one', 'one-back.jsonl')\n"
        "print(path, big - small, sent(path, 'back.jsonl') - one)\n"
    )
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    (uploads / "one").write_bytes(line)
    done = subprocess.run(
        [sys.executable, "-c", code, str(uploads), f"s3://{BUCKET}/in/"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    name, extra, uploading = done.stdout.split()
    path = Path(name)
    assert path.parent == uploads and path.name.endswith("_big.jsonl")
    assert path.stat().st_size == size and path.read_bytes()[: len(line)] == line
    assert int(extra) < 8 * 2**20, f"the fetch held {int(extra) / 2**20:.1f} MiB more"
    assert s3.head_object(Bucket=BUCKET, Key="in/back.jsonl")["ContentLength"] == size
    assert int(uploading) < 12 * 2**20, f"the upload held {int(uploading) / 2**20:.1f} MiB more"


def test_a_missing_object_or_bucket_is_named_and_leaves_no_file(s3, tmp_path):
    with pytest.raises(StorageError, match=r"s3://batches/nope\.jsonl: there is no object"):
        fetch(f"s3://{BUCKET}/nope.jsonl", tmp_path / "in.jsonl")
    with pytest.raises(StorageError, match="the bucket 'gone' does not exist"):
        fetch("s3://gone/in.jsonl", tmp_path / "in.jsonl")
    with pytest.raises(StorageError, match="the bucket 'gone' does not exist"):
        put(Path(__file__), "s3://gone/out.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_wrong_credentials_are_refused_naming_the_object(s3, tmp_path, monkeypatch):
    s3.put_object(Bucket=BUCKET, Key="in.jsonl", Body=b"{}\n")
    _wrong_credentials(monkeypatch)
    with pytest.raises(StorageError, match=r"cannot read s3://batches/in\.jsonl: access denied"):
        fetch(f"s3://{BUCKET}/in.jsonl", tmp_path / "in.jsonl")
    with pytest.raises(StorageError, match=r"cannot write s3://batches/o\.jsonl: access denied"):
        put(Path(__file__), f"s3://{BUCKET}/o.jsonl")


def test_no_credentials_or_no_store_are_said_in_words(s3, tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StorageError, match=r"s3://batches/in\.jsonl: no usable credentials"):
        fetch(f"s3://{BUCKET}/in.jsonl", tmp_path / "in.jsonl")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nobody there
    with pytest.raises(StorageError, match=r"s3://batches/o\.jsonl: the store cannot be reached"):
        put(Path(__file__), f"s3://{BUCKET}/o.jsonl")
    assert not (tmp_path / "in.jsonl").exists()


def test_results_are_delivered_to_an_object_with_the_error_file_beside(s3, tmp_path):
    job = finished_job(tmp_path, {"a": "yes", "b": None, "c": "no"})
    delivery = deliver(job, f"s3://{BUCKET}/out/run.jsonl")
    assert (delivery.results, delivery.failed) == (3, 1)
    write_combined(job, tmp_path / "all.jsonl", tmp_path / "all.errors.jsonl")
    # The very bytes a local delivery writes: final lines in input order, and the failure.
    assert _object(s3, "out/run.jsonl") == (tmp_path / "all.jsonl").read_bytes()
    assert _object(s3, "out/run.errors.jsonl") == (tmp_path / "all.errors.jsonl").read_bytes()
    assert [
        json.loads(x)["custom_id"] for x in _object(s3, "out/run.errors.jsonl").splitlines()
    ] == ["b"]
    assert not list(job.path.glob(".delivering-*"))  # the staged copies are gone


def test_the_worker_delivers_an_object_output_as_the_job_ends(s3, studio_home):
    job = finished_job(studio_home, {"a": "yes", "b": "no"}, output_path=f"s3://{BUCKET}/o.jsonl")
    status = job.read_status()
    assert status.state == "completed" and status.delivered_to == f"s3://{BUCKET}/o.jsonl"
    ids = [json.loads(line)["custom_id"] for line in _object(s3, "o.jsonl").splitlines()]
    assert ids == ["a", "b"] and _object(s3, "o.errors.jsonl") == b""


def test_a_bucket_gone_before_the_output_loses_nothing_and_resume_delivers(
    s3, studio_home, monkeypatch
):
    _drop_bucket(s3)
    target = f"s3://{BUCKET}/o.jsonl"
    job = finished_job(studio_home, {"a": "yes", "b": None}, output_path=target)
    status = job.read_status()
    # The job's outcome stands; the status says the output was not written, and why.
    assert status.state == "completed" and status.delivered_to is None
    assert "cannot write s3://batches/o.jsonl: the bucket 'batches' does not exist" in (
        status.delivery_error or ""
    )
    assert f"core resume {job.job_id}" in status.delivery_error
    kept = {p.name: file_sha256(p) for p in (job.output, job.errors, job.input)}
    # Wrong credentials once the bucket is back: refused in words, exit 5, nothing lost.
    s3.create_bucket(Bucket=BUCKET)
    with monkeypatch.context() as wrong:
        _wrong_credentials(wrong)
        refused = cli("resume", job.job_id)
    assert refused.returncode == 5, refused.stderr
    assert "cannot write s3://batches/o.jsonl: access denied" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert {p.name: file_sha256(p) for p in (job.output, job.errors, job.input)} == kept
    # With the right credentials the same command delivers what the folder kept.
    resumed = cli("resume", job.job_id)
    assert resumed.returncode == 4, resumed.stderr  # completed, one request failed
    lines = [json.loads(x) for x in _object(s3, "o.jsonl").splitlines()]
    assert [(x["custom_id"], x["error"] is None) for x in lines] == [("a", True), ("b", False)]
    assert [json.loads(x)["custom_id"] for x in _object(s3, "o.errors.jsonl").splitlines()] == ["b"]


def test_run_of_a_missing_object_is_a_usage_error_and_makes_no_job(s3, studio_home, model):
    result = cli("run", "s3://gone/in.jsonl", "-o", "s3://gone/out.jsonl", "--model", str(model))
    assert result.returncode == 2
    assert "error: cannot read s3://gone/in.jsonl: the bucket 'gone' does not exist" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    assert not (studio_home / "jobs").exists() or not any((studio_home / "jobs").iterdir())
    bad = cli("run", "s3://gone/in.jsonl", "-o", "s3://gone", "--model", str(model))
    assert bad.returncode == 2 and "names no object" in bad.stderr


def _chunks(size: int, seed: int = 0) -> list[bytes]:
    """``size`` bytes in chunks of uneven lengths (a part never ends on a chunk's end),
    each chunk's bytes its own."""
    import random

    sizes, rng, total = [], random.Random(seed), 0
    while total < size:
        sizes.append(min(rng.randint(1, 3 << 20), size - total))
        total += sizes[-1]
    return [rng.randbytes(n) for n in sizes]


def _open_uploads(client: object) -> list[dict]:
    return client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])


def test_a_stream_several_parts_long_round_trips_byte_identical(s3):
    from core.storage.s3 import upload_stream

    chunks = _chunks(17 << 20)  # three parts of 5 MiB (S3's minimum) and 2 MiB
    size = upload_stream(iter(chunks), f"s3://{BUCKET}/out.jsonl", 5 << 20, in_flight=2)
    assert size == 17 << 20
    head = s3.head_object(Bucket=BUCKET, Key="out.jsonl")
    assert head["ETag"].strip('"').endswith("-4")  # one multipart upload of four parts
    assert _object(s3, "out.jsonl") == b"".join(chunks)
    assert not _open_uploads(s3)


def test_the_size_returned_is_the_bytes_sent_one_put_or_many_parts(s3, s3_requests, monkeypatch):
    from core.storage.s3 import upload_stream
    from tests.support.s3 import small_parts

    small_parts(monkeypatch, 1024)
    for total, chunk in ((0, 1), (1000, 7), (1024, 1024), (1025, 100), (5000, 333), (9000, 5000)):
        data = bytes(i % 251 for i in range(total))
        pieces = [data[i : i + chunk] for i in range(0, total, chunk)]
        key = f"sizes/{total}.bin"
        s3_requests.clear()
        assert upload_stream(iter(pieces), f"s3://{BUCKET}/{key}", 1024, in_flight=2) == total
        assert s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"] == total
        assert _object(s3, key) == data
        multipart = [r for r in s3_requests if "uploads" in r["query"]]
        assert bool(multipart) == (total >= 1024), total  # under one part: one PUT


def test_a_stream_that_fails_midway_leaves_no_object_and_no_open_upload(s3):
    from core.storage.s3 import upload_stream

    s3.put_object(Bucket=BUCKET, Key="out.jsonl", Body=b"the last delivery\n")
    read = []

    def failing():
        for chunk in _chunks(12 << 20):  # two parts sent by the time it fails
            read.append(len(chunk))
            yield chunk
        raise OSError("the job folder's disk went away")

    with pytest.raises(OSError, match="disk went away"):
        upload_stream(failing(), f"s3://{BUCKET}/out.jsonl", 5 << 20, in_flight=2)
    assert sum(read) == 12 << 20
    assert not _open_uploads(s3)  # aborted: the store keeps no parts
    assert _object(s3, "out.jsonl") == b"the last delivery\n"  # not replaced
    with pytest.raises(OSError, match="went away"):  # and where there was no object
        upload_stream(failing(), f"s3://{BUCKET}/new.jsonl", 5 << 20, in_flight=2)
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="new")
    assert not _open_uploads(s3)


def test_a_store_that_refuses_a_part_stops_the_stream_being_read(s3, monkeypatch):
    from core.storage.s3 import upload_stream
    from tests.support.s3 import small_parts

    small_parts(monkeypatch, 1024)
    read = [0]

    def stream():
        for i in range(4000):
            if i == 100:
                _drop_bucket(s3)
            read[0] += 1
            yield b"x" * 99 + b"\n"

    with pytest.raises(StorageError, match=r"out\.jsonl: the bucket 'batches' does not exist"):
        upload_stream(stream(), f"s3://{BUCKET}/out.jsonl", 1024, in_flight=2)
    assert read[0] < 1000, f"{read[0]} of 4000 lines read after the upload failed"
