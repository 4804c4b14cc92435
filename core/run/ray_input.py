"""A Ray job's input read by its replicas from object storage, not sent by the driver.

When a Ray job's input is an object (``spec.source`` is ``s3://...``), the driver (the
job's worker) never holds the requests' bodies: it keeps what it needs to schedule and
count them (:func:`light`), finds each pending request's line in the job folder's copy of
the input by one streamed pass (:func:`input_spans`), and hands each replica a shard of
``(custom_id, offset, length)``. The replica reads those byte ranges from the object
(ranged GETs, :func:`core.storage.s3.read_spans`, with the credentials and endpoint of its
runtime env) and checks the lines into requests as the driver's check did
(:func:`read_requests`). The object must be the one the job was made from: its size is
compared when the job starts and every read asks for its ETag, so a replaced object is
refused in words instead of running other requests.
"""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel

from core.check.engine_requests import (
    ChatRequest,
    CompletionRequest,
    EngineRequest,
    PooledRequest,
)
from core.check.scanner import Scanner
from core.jobs.ledger import request_id
from core.schemas import JobDefaults, JobSpec
from core.storage.s3 import StorageError, is_s3, read_spans

BOM = b"\xef\xbb\xbf"
REPLICA_AGENT = "batch-studio-replica"  # the replicas' User-Agent, seen in the store's log


def replicas_read_input(spec: JobSpec) -> bool:
    """Whether the replicas read the job's requests from its input object themselves."""
    return spec.ray is not None and is_s3(spec.source)


def light(request: EngineRequest) -> EngineRequest:
    """The request without what only the engine needs (its prompt, messages, tools and
    texts): what the driver keeps to group, fit and count requests."""
    match request:
        case ChatRequest():
            return replace(request, messages=[], tools=None, json_schema=None)
        case CompletionRequest():
            return replace(request, prompt="", json_schema=None)
        case PooledRequest():
            return replace(request, inputs=[])
    raise TypeError(f"not an engine request: {request!r}")


class ObjectShard(BaseModel):
    """What a replica is sent for one shard: where its lines are in the input object."""

    source: str  # s3://bucket/key of the job's input
    etag: str | None = None  # the object's version when the job started
    lines: list[tuple[str, int, int]]  # (custom_id, byte offset, length) in input order


def input_spans(path: Path, ids: set[str]) -> dict[str, tuple[int, int]]:
    """``custom_id -> (offset, length)`` of the first line naming each of ``ids`` in the
    input file ``path`` (the job folder's byte-for-byte copy of the object), by one
    streamed pass; a first-line BOM is not part of its line."""
    spans: dict[str, tuple[int, int]] = {}
    position = 0
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            offset, length = position, len(raw)
            position += len(raw)
            if line_no == 1 and raw.startswith(BOM):
                offset, length, raw = offset + len(BOM), length - len(BOM), raw[len(BOM) :]
            cid = request_id(raw) if raw.strip() else None
            if cid in ids and cid not in spans:
                spans[cid] = (offset, length)
    return spans


def read_requests(shard: ObjectShard, defaults: JobDefaults) -> list[EngineRequest]:
    """The shard's requests, read from the object and checked as the job's check did.

    Raises:
        StorageError: the object cannot be read, or a line is not the request it was
            (the object changed since the job was made).
    """
    raws = list(
        read_spans(shard.source, [(o, n) for _, o, n in shard.lines], shard.etag, REPLICA_AGENT)
    )
    data = b"".join(raw if raw.endswith(b"\n") else raw + b"\n" for raw in raws)
    requests = []
    for (cid, offset, _), checked in zip(
        shard.lines, Scanner(defaults).lines(io.BytesIO(data)), strict=False
    ):
        if checked.custom_id != cid or checked.request is None:
            raise StorageError(
                f"cannot read {shard.source}: byte {offset} is no longer the request "
                f"{cid!r}; the object changed since the job was made"
            )
        requests.append(checked.request)
    if len(requests) != len(shard.lines):
        raise StorageError(
            f"cannot read {shard.source}: fewer lines than the job's; "
            "the object changed since the job was made"
        )
    return requests
