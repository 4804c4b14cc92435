"""A local S3 server (moto) for the tests, and a log of the requests it answers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.browser import free_port

BUCKET = "batches"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A local S3 server (moto, in a thread of this process) with the bucket ``batches``;
    the standard AWS variables point every client, and the processes the test starts, at
    it. Yields a client for the test's own set-up."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    try:
        yield client
    finally:
        server.stop()


@pytest.fixture
def s3_requests(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every request the local S3 server answers, as the store's access log has it: when,
    the method, the key's path, the query, the body's size, its Range header and who sent
    it (User-Agent)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    seen: list[dict[str, Any]] = []
    serve = DomainDispatcherApplication.__call__

    def logged(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        seen.append(
            {
                "at": time.time(),
                "method": environ.get("REQUEST_METHOD"),
                "path": environ.get("PATH_INFO"),
                "query": environ.get("QUERY_STRING", ""),
                "size": int(environ.get("CONTENT_LENGTH") or 0),
                "range": environ.get("HTTP_RANGE"),
                "agent": environ.get("HTTP_USER_AGENT", ""),
            }
        )
        return serve(self, environ, start_response)

    monkeypatch.setattr(DomainDispatcherApplication, "__call__", logged)
    return seen


def small_parts(monkeypatch: pytest.MonkeyPatch, part_bytes: int) -> None:
    """Scales S3's rule that a part (but the last) holds 5 MiB or more down to
    ``part_bytes``, in the server (moto) and in boto3's transfer manager (s3transfer, which
    raises a smaller part size to S3's minimum), so a test sends many parts quickly."""
    from functools import partial

    from moto.s3 import models
    from s3transfer import upload

    monkeypatch.setattr(models, "S3_UPLOAD_PART_MIN_SIZE", part_bytes)
    adjuster = partial(upload.ChunksizeAdjuster, min_size=part_bytes)
    monkeypatch.setattr(upload, "ChunksizeAdjuster", adjuster)


def _drop_bucket(client: object) -> None:
    """Empties and deletes the bucket, again while a running job's replicas still write to
    it (the delete then finds new objects: BucketNotEmpty)."""
    from botocore.exceptions import ClientError

    for _ in range(20):
        for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
            client.delete_object(Bucket=BUCKET, Key=item["Key"])
        try:
            client.delete_bucket(Bucket=BUCKET)
            return
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "BucketNotEmpty":
                raise
    raise AssertionError("the bucket kept filling while it was emptied")


def _wrong_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes the server check credentials (moto accepts any by default) and gives keys it
    does not know."""
    from moto import settings

    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOTAREALKEY00000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")


def _object(client: object, key: str) -> bytes:
    return client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
