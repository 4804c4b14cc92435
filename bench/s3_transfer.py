"""Benchmark: a stream uploaded to S3 by boto3's transfer manager against the hand-written
threaded multipart upload it replaced: wall time and peak memory.

    .venv/bin/python bench/s3_transfer.py                       # 128 and 256 MiB streams
    .venv/bin/python bench/s3_transfer.py --sizes 64 --repeats 2

A local S3 server (moto) runs in a process of its own, so its copy of the objects is not
measured. Each upload runs in a fresh process that first sends one small object (boto3's
imports and models loaded), then uploads a generated stream of 1 MiB chunks (a new bytes
object each, as a file read gives them) as ``core.delivery`` does, in parts of
``--part-mib`` with ``--in-flight`` parts sent at once, two ways:

- hand-written: the threaded multipart upload ``core/storage/s3.py`` had (a copy, below);
- boto3: ``core.storage.s3.upload_stream``, boto3's transfer manager (s3transfer) reading
  the stream as a file that cannot seek, at most ``--in-flight`` parts read and not sent.

For each it prints the wall time, MiB/s and the peak RSS growth: the kernel's high-water
mark of the process's RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, reset just
before the upload through ``/proc/self/clear_refs``) minus its RSS then; "sampled" beside it
is the highest RSS a thread read every 20 ms (psutil), minus the same. Then a ratio line
(boto3 / hand-written) for time and memory per size, and the peak growth of the largest
size over the smallest for each way: near 1 when memory is bounded whatever the stream's
length. The object's size is checked against the bytes sent.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUCKET = "bench"
MIB = 1 << 20
WAYS = ("hand-written", "boto3")


# -- the hand-written upload core/storage/s3.py had, kept as the baseline ------------------


def hand_written_upload(chunks: Iterable[bytes], uri: str, part_bytes: int, in_flight: int) -> int:
    """``upload_stream`` as it was: parts joined from the chunks, ``in_flight`` of them sent
    by a thread pool at once, one PUT when all fit in one part."""
    from core.storage.s3 import _client, _location

    location = _location(uri)
    upload = _Upload(_client(), {"Bucket": location.bucket, "Key": location.key}, in_flight)
    buffer: list[bytes] = []
    held = 0
    try:
        for chunk in chunks:
            buffer.append(chunk)
            held += len(chunk)
            if held >= part_bytes:
                upload.send(b"".join(buffer))
                buffer, held = [], 0
        upload.finish(b"".join(buffer))
    except BaseException:
        upload.abort()
        raise
    return upload.size


class _Upload:
    def __init__(self, client: Any, where: dict[str, str], in_flight: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.client, self.where, self.in_flight = client, where, max(1, in_flight)
        self.pool = ThreadPoolExecutor(self.in_flight)
        self.upload_id: str | None = None
        self.sent: list[Any] = []
        self.size = 0

    def send(self, data: bytes) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait

        if self.upload_id is None:
            self.upload_id = self.client.create_multipart_upload(**self.where)["UploadId"]
        while True:
            running = [f for f in self.sent if not f.done()]
            for failed in (f for f in self.sent if f.done() and f.exception()):
                raise failed.exception()
            if len(running) < self.in_flight:
                break
            wait(running, return_when=FIRST_COMPLETED)
        self.size += len(data)
        self.sent.append(self.pool.submit(self._part, len(self.sent) + 1, data))

    def _part(self, number: int, data: bytes) -> dict[str, Any]:
        got = self.client.upload_part(
            **self.where, UploadId=self.upload_id, PartNumber=number, Body=data
        )
        return {"PartNumber": number, "ETag": got["ETag"]}

    def finish(self, rest: bytes) -> None:
        if self.upload_id is None:
            self.client.put_object(**self.where, Body=rest)
            self.size += len(rest)
        else:
            if rest:
                self.send(rest)
            parts = [f.result() for f in self.sent]
            self.client.complete_multipart_upload(
                **self.where, UploadId=self.upload_id, MultipartUpload={"Parts": parts}
            )
        self.pool.shutdown()

    def abort(self) -> None:
        self.pool.shutdown(cancel_futures=True)
        if self.upload_id is not None:
            self.client.abort_multipart_upload(**self.where, UploadId=self.upload_id)


# -- one upload, in a process of its own ------------------------------------------------------


def stream(mib: int) -> Iterator[bytes]:
    """``mib`` chunks of 1 MiB, each a new bytes object."""
    block = b"x" * (MIB - 8)
    for i in range(mib):
        yield block + i.to_bytes(8, "big")


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one_upload(way: str, mib: int, part_bytes: int, in_flight: int) -> dict[str, Any]:
    import gc

    import psutil

    from core.storage.s3 import _client, upload_stream

    upload = hand_written_upload if way == "hand-written" else upload_stream
    key = f"{way}-{mib}.bin"
    uri = f"s3://{BUCKET}/{key}"
    upload(iter([b"warm-up\n"]), uri, part_bytes, in_flight)
    gc.collect()
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the high-water mark of RSS starts again from RSS now
    before = rss()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        process = psutil.Process()
        while not done.wait(0.02):
            peak[0] = max(peak[0], process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    size = upload(stream(mib), uri, part_bytes, in_flight)
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    high = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    client = _client()
    stored = client.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
    client.delete_object(Bucket=BUCKET, Key=key)
    if not size == stored == mib * MIB:
        raise SystemExit(f"{way}: sent {size} bytes, the object has {stored}, not {mib * MIB}")
    return {"wall": wall, "growth": high - before, "sampled": peak[0] - before}


# -- the server and the runs ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(env: dict[str, str]) -> subprocess.Popen:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        server.kill()
        raise SystemExit("the moto server did not start")
    return server


def run_one(way: str, mib: int, args: argparse.Namespace, env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", way, "--sizes", str(mib),
         "--part-mib", str(args.part_mib), "--in-flight", str(args.in_flight)],
        env=env, capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="128,256", help="stream sizes in MiB, comma-separated")
    parser.add_argument("--part-mib", type=int, default=8, help="part size (S3: 5 or more)")
    parser.add_argument("--in-flight", type=int, default=4, help="parts sent at once")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each way per size")
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    part_bytes = args.part_mib * MIB
    if args.child:
        print(json.dumps(one_upload(args.child, sizes[0], part_bytes, args.in_flight)))
        return

    env = dict(os.environ)
    env.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )  # fmt: skip
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        env.pop(name, None)
    server = start_server(env)
    try:
        import boto3

        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                     aws_access_key_id="testing", aws_secret_access_key="testing",
                     ).create_bucket(Bucket=BUCKET)  # fmt: skip
        print(
            f"{args.part_mib} MiB parts, {args.in_flight} in flight, 1 MiB chunks; "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        runs: dict[tuple[str, int], list[dict]] = {}
        for mib in sizes:
            for _ in range(args.repeats):
                for way in WAYS:  # interleaved, so a busy moment falls on both
                    got = run_one(way, mib, args, env)
                    runs.setdefault((way, mib), []).append(got)
                    print(
                        f"{mib} MiB {way}: {got['wall']:.2f} s, {mib / got['wall']:.1f} MiB/s, "
                        f"peak RSS growth {got['growth'] / MIB:.1f} MiB "
                        f"(sampled {got['sampled'] / MIB:.1f} MiB)",
                        flush=True,
                    )
        # the fastest run's time and the largest growth of a way's runs
        best = {
            k: {"wall": min(r["wall"] for r in v), "growth": max(r["growth"] for r in v)}
            for k, v in runs.items()
        }
        for mib in sizes:
            hand, boto = best[("hand-written", mib)], best[("boto3", mib)]
            print(
                f"{mib} MiB boto3 / hand-written: time {boto['wall'] / hand['wall']:.2f}, "
                f"memory {boto['growth'] / hand['growth']:.2f}"
            )
        if len(sizes) > 1:
            small, large = min(sizes), max(sizes)
            for way in WAYS:
                ratio = best[(way, large)]["growth"] / best[(way, small)]["growth"]
                print(f"{way} peak growth {large} MiB / {small} MiB: {ratio:.2f}")
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
