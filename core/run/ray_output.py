"""A Ray job's results written by its replicas to object storage, not sent to the driver.

When a Ray job's output is an object (``s3://bucket/out.jsonl``), each replica writes the
result lines of a shard it ran (the same JSON lines the local path writes) to a part of its
own, ``out.jsonl.parts/<job id>/<random>.jsonl``: a new name per run of a shard, so a shard
run again after a lost node never overwrites another's. The driver (the job's worker) gets
only an acknowledgement over Ray (:class:`PartAck`: the part, its ETag, and each request's
byte range in it), which it appends to the job folder's ``acks.jsonl`` (fsynced) before
anything else. It then reads the acknowledged lines from the part (ranged GETs, streamed, a
shard at a time) into the job folder's result files like any run's lines, so the pages,
``resume``, ``verify`` and ``reconcile`` work as for a local file. A request acknowledged
twice keeps its first acknowledgement, and parts no acknowledgement names (a replica that
died after writing one) are never read. The output object is assembled from the job
folder when the job ends (:func:`core.jobs.delivery.deliver`), and the parts are removed.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from core.jobs.delivery import parts_prefix
from core.jobs.folder import JobFolder
from core.jobs.ledger import read_ledger
from core.run.ray_input import REPLICA_AGENT
from core.schemas import JobSpec
from core.storage.s3 import is_s3, put_bytes, read_spans


def replicas_write_output(spec: JobSpec) -> bool:
    """Whether the replicas write the job's results to its output object themselves."""
    return spec.ray is not None and is_s3(spec.output_path)


def job_parts(spec: JobSpec) -> str | None:
    """Where the job's replicas write their parts (None: they send their lines)."""
    if not replicas_write_output(spec):
        return None
    assert spec.output_path is not None
    return parts_prefix(spec.output_path, spec.job_id)


class PartAck(BaseModel):
    """What a replica sends the driver for a shard whose results it wrote to a part."""

    part: str  # s3://bucket/key of the part
    etag: str  # the part as written: a later read asks for this version
    lines: list[tuple[str, int, int]]  # (custom_id, byte offset, length) in the part


def write_part(prefix: str, lines: list[dict[str, Any]]) -> PartAck:
    """Writes a shard's result lines to a new part under ``prefix`` (one PUT, as the
    replicas' User-Agent); returns its acknowledgement.

    Raises:
        StorageError: the part cannot be written (the message names it and why).
    """
    data, spans = bytearray(), []
    for line in lines:
        raw = json.dumps(line, ensure_ascii=False).encode("utf-8") + b"\n"
        spans.append((line["custom_id"], len(data), len(raw)))
        data += raw
    part = f"{prefix}{uuid.uuid4().hex}.jsonl"
    etag = put_bytes(bytes(data), part, REPLICA_AGENT)
    return PartAck(part=part, etag=etag, lines=spans)


class AckLedger:
    """The job folder's ``acks.jsonl``: every acknowledgement, appended and fsynced."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, ack: PartAck) -> None:
        with self.path.open("ab") as out:
            out.write(ack.model_dump_json().encode("utf-8") + b"\n")
            out.flush()
            os.fsync(out.fileno())

    def first(self, ids: set[str]) -> list[PartAck]:
        """The acknowledgements of ``ids``, each request in the first that names it (a
        torn last line, from a driver killed as it wrote, is no acknowledgement)."""
        if not self.path.exists():
            return []
        seen: set[str] = set()
        found: list[PartAck] = []
        with self.path.open("rb") as handle:
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break
                ack = PartAck.model_validate_json(raw)
                kept = [s for s in ack.lines if s[0] in ids and s[0] not in seen]
                seen.update(cid for cid, _, _ in kept)
                if kept:
                    found.append(ack.model_copy(update={"lines": kept}))
        return found


def read_part(ack: PartAck) -> Iterator[dict[str, Any]]:
    """The acknowledged lines of a part, read by ranged GETs in the part's order.

    Raises:
        StorageError: the part cannot be read or changed (the message names it and why).
    """
    spans = sorted((offset, length) for _, offset, length in ack.lines)
    for raw in read_spans(ack.part, spans, ack.etag):
        yield json.loads(raw)


def acked_without_line(job_dir: Path, ids: set[str]) -> list[PartAck]:
    """Acknowledgements of the requests among ``ids`` that have no line in the job folder
    (a driver stopped between an acknowledgement and its lines): read, not run again."""
    job = JobFolder(job_dir)
    if not job.acks.exists():
        return []
    ledger = read_ledger(job)
    return AckLedger(job.acks).first(
        {cid for cid in ids if cid not in ledger.succeeded and cid not in ledger.failed}
    )
