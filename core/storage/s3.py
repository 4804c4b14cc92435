"""Object storage in and out: ``s3://bucket/key`` on S3 and the stores that speak its API
(MinIO, Ceph, the clouds).

The endpoint, region and credentials come from boto3's standard chain, so nothing here
names them: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (/ ``AWS_SESSION_TOKEN``),
``AWS_PROFILE`` and the shared config files, ``AWS_DEFAULT_REGION``, and
``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``) for a store that is not AWS.

Objects are streamed between the store and a file on disk (one GET read in blocks; a
multipart upload from the file) or from a stream of lines (:func:`upload_stream`), never held
whole in memory; the replicas of a Ray job read the lines of their shards with ranged GETs
(:func:`read_spans`) and write their results as small objects (:func:`put_bytes`). Every
failure is a :class:`StorageError` whose message names the object and says what to check.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.files import write_atomic

SCHEME = "s3://"


class StorageError(Exception):
    """An object could not be read or written; the message names it and the reason."""


def is_s3(path: object) -> bool:
    """Whether ``path`` names an object (``s3://...``) rather than a local file."""
    return isinstance(path, str) and path.startswith(SCHEME)


class S3Location(BaseModel):
    """One object: its bucket and key."""

    model_config = ConfigDict(frozen=True)

    bucket: str
    key: str

    @classmethod
    def parse(cls, uri: str) -> S3Location:
        """``s3://bucket/key`` as a location.

        Raises:
            ValueError: the text is not such a URI (the message says what is wrong).
        """
        if not is_s3(uri):
            raise ValueError(f"{uri!r} is not an s3:// URI (write s3://bucket/key.jsonl)")
        bucket, _, key = uri[len(SCHEME) :].partition("/")
        if not bucket or not key or key.endswith("/"):
            raise ValueError(f"{uri!r} names no object: write s3://bucket/key.jsonl")
        return cls(bucket=bucket, key=key)

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}"

    def beside(self, suffix: str) -> S3Location:
        """The object next to this one whose key ends in ``suffix`` instead of its
        extension (``out.jsonl`` -> ``out.errors.jsonl``)."""
        stem, dot, _ = self.key.rpartition(".")
        base = stem if dot and "/" not in self.key[len(stem) :] else self.key
        return S3Location(bucket=self.bucket, key=base + suffix)


def _client(agent: str = "batch-studio") -> Any:
    """An S3 client from the standard chain; a session of its own, as boto3's default
    session is not safe to share between threads. ``agent`` ends its User-Agent, so a
    store's access log tells the studio's requests from its replicas'."""
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=10,
        user_agent_extra=agent,
    )
    return boto3.session.Session().client("s3", config=config)


CREDENTIALS_HINT = (
    "check the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE) and "
    "the endpoint (AWS_ENDPOINT_URL)"
)
_DENIED = {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden"}


def _bucket_exists(client: Any, bucket: str) -> bool | None:
    """Whether the bucket exists (None: the store would not say)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        return False if code in ("404", "NoSuchBucket") else None
    except BotoCoreError:
        return None
    return True


def _explain(exc: BaseException, location: S3Location, doing: str, client: Any) -> StorageError:
    """A boto3 failure as one sentence that names the object and what to check."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    # boto3's upload wraps the store's answer in S3UploadFailedError: the answer is its context.
    cause = exc if isinstance(exc, ClientError | BotoCoreError) else exc.__context__
    where = f"cannot {doing} {location.uri}"
    if isinstance(cause, NoCredentialsError | PartialCredentialsError):
        return StorageError(f"{where}: no usable credentials found; {CREDENTIALS_HINT}")
    if isinstance(cause, EndpointConnectionError):
        return StorageError(f"{where}: the store cannot be reached ({cause}); {CREDENTIALS_HINT}")
    if isinstance(cause, ClientError):
        error = cause.response.get("Error", {})
        code = str(error.get("Code", ""))
        if code in _DENIED:
            return StorageError(f"{where}: access denied ({code}); {CREDENTIALS_HINT}")
        if code in ("NoSuchBucket", "404", "NoSuchKey"):
            if code == "NoSuchBucket" or _bucket_exists(client, location.bucket) is False:
                return StorageError(f"{where}: the bucket {location.bucket!r} does not exist")
            return StorageError(f"{where}: there is no object {location.key!r} in that bucket")
        if code in ("PreconditionFailed", "412"):
            return StorageError(
                f"{where}: the object changed since the job was made; "
                "make a new job for the new object"
            )
        return StorageError(f"{where}: {code or 'error'}: {error.get('Message', cause)}")
    return StorageError(f"{where}: {cause or exc}")


def fetch(uri: str, dest: Path) -> Path:
    """Copies the object ``uri`` into the file ``dest``, streamed in blocks of 1 MiB from
    one GET (boto3's parallel download would hold several 8 MiB parts at once); the file
    appears whole or not at all.

    Raises:
        StorageError: the URI is malformed, or the object cannot be read (named, with why).
    """
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    location = _location(uri)
    client = _client()
    try:
        body = client.get_object(Bucket=location.bucket, Key=location.key)["Body"]
        with body:
            write_atomic(dest, body)
    except (Boto3Error, BotoCoreError, ClientError) as exc:
        raise _explain(exc, location, "read", client) from None
    return dest


def put(path: Path, uri: str) -> None:
    """Uploads the file ``path`` to the object ``uri``, streamed from disk (multipart past
    8 MiB); the object is replaced only once the whole file is in.

    Raises:
        StorageError: the URI is malformed, or the object cannot be written (named, with why).
    """
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    location = _location(uri)
    client = _client()
    try:
        client.upload_file(os.fspath(path), location.bucket, location.key)
    except (Boto3Error, BotoCoreError, ClientError) as exc:
        raise _explain(exc, location, "write", client) from None


PART_BYTES = 8 << 20  # a multipart upload's part; S3 wants 5 MiB or more but for the last
IN_FLIGHT = 4  # parts sent at once (boto3's own transfers send 10): what memory holds


def upload_stream(
    chunks: Iterable[bytes], uri: str, part_bytes: int = PART_BYTES, in_flight: int = IN_FLIGHT
) -> int:
    """Uploads the bytes of ``chunks``, in order, to the object ``uri`` as one multipart
    upload of ``part_bytes`` parts, ``in_flight`` of them sent at once: what is held is
    those parts and the one filling. Returns the object's size. The object is replaced
    only once the whole stream is in; a failed upload is aborted so the store keeps no
    orphan parts. A stream shorter than a part is one PUT.

    boto3's own transfer manager (s3transfer) sends it: the stream is read as a file that
    cannot seek, a part at a time, and at most ``in_flight`` parts read are not yet sent
    (``bench/s3_transfer.py`` measured its peak memory and time against the hand-written
    threaded upload it replaced: the same, and bounded whatever the stream's length). Once
    the upload has failed the rest of the stream is not read.

    Raises:
        StorageError: the URI is malformed, or the object cannot be written (named, with why).
    """
    from boto3.exceptions import Boto3Error
    from boto3.s3.transfer import TransferConfig, create_transfer_manager
    from botocore.exceptions import BotoCoreError, ClientError

    location = _location(uri)
    client = _client()
    config = TransferConfig(
        multipart_threshold=part_bytes,
        multipart_chunksize=part_bytes,
        max_concurrency=max(1, in_flight),
        preferred_transfer_client="classic",  # the CRT's transfers hold memory of their own
    )
    config.max_in_memory_upload_chunks = max(1, in_flight)  # read, not yet sent
    stream = _Stream(chunks)
    try:
        with create_transfer_manager(client, config) as manager:
            future = manager.upload(stream, location.bucket, location.key)
            stream.failed = future.done  # done before the stream ends: failed or cancelled
            future.result()
    except (Boto3Error, BotoCoreError, ClientError) as exc:
        raise _explain(exc, location, "write", client) from None
    return stream.size


class _Stream:
    """The bytes of ``chunks`` as a file that reads forward only, as s3transfer reads a
    stream it cannot seek: a part at a time, each read as long as asked (S3 refuses a
    short part but for the last). It ends early once ``failed()``: the upload is over."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks = iter(chunks)
        self.rest = b""  # what the last chunk read had beyond the part it ended
        self.size = 0
        self.failed: Any = lambda: False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, size: int | None = -1) -> bytes:
        want = -1 if size is None else size
        parts, held = ([self.rest], len(self.rest)) if self.rest else ([], 0)
        self.rest = b""
        while (want < 0 or held < want) and not self.failed():
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            parts.append(chunk)
            held += len(chunk)
        if 0 <= want < held:  # split the last chunk only: the part is joined once
            over = held - want
            last = parts[-1]
            parts[-1], self.rest = last[: len(last) - over], last[len(last) - over :]
        data = b"".join(parts)
        self.size += len(data)
        return data


def put_bytes(data: bytes, uri: str, agent: str = "batch-studio") -> str:
    """Writes ``data`` as the object ``uri`` in one PUT; returns its ETag.

    Raises:
        StorageError: the URI is malformed, or the object cannot be written (named, with why).
    """
    from botocore.exceptions import BotoCoreError, ClientError

    location = _location(uri)
    client = _client(agent)
    try:
        return client.put_object(Bucket=location.bucket, Key=location.key, Body=data)["ETag"]
    except (BotoCoreError, ClientError) as exc:
        raise _explain(exc, location, "write", client) from None


def remove_under(uri: str) -> int:
    """Removes every object whose key starts with ``uri``'s key; returns how many.

    Raises:
        StorageError: the objects cannot be listed or removed (named, with why).
    """
    from botocore.exceptions import BotoCoreError, ClientError

    location = _location(uri.rstrip("/"))
    prefix = uri[len(SCHEME) + len(location.bucket) + 1 :]
    client = _client()
    removed = 0
    try:
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=location.bucket, Prefix=prefix
        )
        for page in pages:
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=location.bucket, Delete={"Objects": keys})
                removed += len(keys)
    except (BotoCoreError, ClientError) as exc:
        raise _explain(exc, location, "remove", client) from None
    return removed


class ObjectInfo(BaseModel):
    """What a HEAD tells of an object: its size and its version tag."""

    size: int
    etag: str


def stat(uri: str) -> ObjectInfo:
    """The object's size and ETag, without reading it.

    Raises:
        StorageError: the URI is malformed, or the object cannot be read (named, with why).
    """
    from botocore.exceptions import BotoCoreError, ClientError

    location = _location(uri)
    client = _client()
    try:
        head = client.head_object(Bucket=location.bucket, Key=location.key)
    except (BotoCoreError, ClientError) as exc:
        raise _explain(exc, location, "read", client) from None
    return ObjectInfo(size=head["ContentLength"], etag=head["ETag"])


RUN_GAP = 1 << 16  # spans this close are read by one GET (the bytes between are skipped)


def read_spans(
    uri: str, spans: list[tuple[int, int]], etag: str | None = None, agent: str = "batch-studio"
) -> Iterator[bytes]:
    """Yields the bytes of each ``(offset, length)`` span of the object, in order.

    Spans must ascend without overlapping; each run of nearby spans is one ranged GET, read
    as a stream, so what is held is one span at a time. With ``etag`` every GET asks for
    that version of the object, and a replaced object is refused in words.

    Raises:
        StorageError: the object cannot be read, changed, or is shorter than a span.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    location = _location(uri)
    client = _client(agent)
    try:
        for run in _runs(spans):
            start, end = run[0][0], run[-1][0] + run[-1][1]
            extra = {"IfMatch": etag} if etag else {}
            got = client.get_object(
                Bucket=location.bucket, Key=location.key, Range=f"bytes={start}-{end - 1}", **extra
            )
            with got["Body"] as body:
                position = start
                for offset, length in run:
                    _read_exactly(body, offset - position)  # the bytes between two spans
                    data = _read_exactly(body, length)
                    if len(data) < length:
                        raise StorageError(
                            f"cannot read {location.uri}: it ends before byte {offset + length}"
                            "; the object changed since the job was made"
                        )
                    position = offset + length
                    yield data
    except (BotoCoreError, ClientError) as exc:
        raise _explain(exc, location, "read", client) from None


def _runs(spans: list[tuple[int, int]]) -> Iterator[list[tuple[int, int]]]:
    run: list[tuple[int, int]] = []
    for offset, length in spans:
        if run and offset - (run[-1][0] + run[-1][1]) > RUN_GAP:
            yield run
            run = []
        run.append((offset, length))
    if run:
        yield run


def _read_exactly(body: Any, size: int) -> bytes:
    """``size`` bytes of a stream (fewer only at its end)."""
    parts, left = [], size
    while left > 0:
        data = body.read(min(left, 1 << 20))
        if not data:
            break
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


def _location(uri: str) -> S3Location:
    try:
        return S3Location.parse(uri)
    except ValueError as exc:
        raise StorageError(str(exc)) from None
