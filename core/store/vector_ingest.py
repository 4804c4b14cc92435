"""Embedding result lines into DuckDB: one fixed-size ``FLOAT[dim]`` row per input.

A ``/v1/embeddings`` output line carries ``response.body.data``: one item per input of the
request (``index`` 0..k-1), each with its ``embedding`` as a list of floats or as base64 of
little-endian float32 (``encoding_format: "base64"``). Ingest keeps each vector once, keyed
by ``(job_id, custom_id, input_index)``, in a table per dimension (``vectors_384``): DuckDB's
array functions need arrays of one fixed size, and a fixed-size array is stored and scanned
without list offsets. A job's vectors share one dimension (the first vector ingested sets
it, in ``vector_jobs``).

Lines are read here with msgspec (the vector as numbers or base64 needs decoding DuckDB's
JSON functions cannot do), each on its own: a line whose embedding cannot be read becomes a
row of ``vector_problems`` naming the line and why, and the job's other lines go on. The
results table keeps its one row per request as for any endpoint (``core.store.schema``).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

import duckdb
import msgspec
import numpy as np
import pyarrow as pa


class _Item(msgspec.Struct):
    embedding: list[float] | str
    index: int = -1


class _Body(msgspec.Struct):
    object: str | None = None
    data: list[_Item] | None = None


class _Response(msgspec.Struct):
    status_code: int | None = None
    body: _Body | None = None


class _Line(msgspec.Struct):
    custom_id: str | None = None
    response: _Response | None = None
    error: Any = None


_decode_line = msgspec.json.Decoder(_Line).decode
_decode_any = msgspec.json.Decoder().decode
# Present in every embedding output line, and in a chat line only by rare coincidence: lines
# without it are skipped before any parsing (a chat job's ingest pays one substring search).
_MARKER = '"embedding"'


def vector_table(dims: int) -> str:
    """The table holding the vectors of ``dims`` dimensions (an int: safe in SQL)."""
    return f"vectors_{int(dims)}"


@dataclass
class DecodedVectors:
    """What a batch of result lines holds: vectors in line order, and problems."""

    custom_ids: list[str] = field(default_factory=list)
    indexes: list[int] = field(default_factory=list)
    vectors: list[np.ndarray] = field(default_factory=list)
    problems: list[tuple[str, int, str]] = field(default_factory=list)  # (id, index, why)


def _vector(item: _Item) -> np.ndarray:
    """One item's embedding as float32; raises ValueError saying what is wrong with it."""
    if isinstance(item.embedding, str):
        try:
            raw = base64.b64decode(item.embedding, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"the embedding is not valid base64 ({exc})") from None
        if len(raw) % 4:
            raise ValueError(f"the base64 embedding has {len(raw)} bytes, not float32s")
        vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    else:
        vector = np.asarray(item.embedding, dtype=np.float32)
    if vector.size == 0:
        raise ValueError("the embedding is empty")
    if not np.isfinite(vector).all():
        raise ValueError("the embedding holds NaN or infinity")
    return vector


def decode_lines(raws: list[str], dims: int | None) -> tuple[DecodedVectors, int | None]:
    """The vectors of the successful embedding lines among ``raws``.

    Args:
        raws: result lines (any endpoint; lines of other endpoints and failures are skipped).
        dims: the job's dimension when it has vectors already, else None (the first vector
            read sets it).

    Returns:
        The vectors and problems found, and the job's dimension (None if still unknown).
    """
    found = DecodedVectors()
    for raw in raws:
        if _MARKER not in raw:
            continue
        try:
            line = _decode_line(raw)
        except msgspec.DecodeError as exc:
            custom_id = _custom_id(raw)
            if custom_id is not None:
                found.problems.append((custom_id, -1, f"the embedding could not be read: {exc}"))
            continue
        body = line.response.body if line.response else None
        if line.error is not None or body is None or body.object != "list" or not body.data:
            continue
        custom_id = line.custom_id or ""
        seen: set[int] = set()
        for position, item in enumerate(body.data):
            index = item.index if item.index >= 0 else position
            try:
                if index in seen:
                    raise ValueError(f"input {index} appears twice in the line")
                seen.add(index)
                vector = _vector(item)
                if dims is not None and vector.size != dims:
                    raise ValueError(
                        f"the vector has {vector.size} dimensions; the job's have {dims}"
                    )
            except ValueError as exc:
                found.problems.append((custom_id, index, str(exc)))
                continue
            dims = vector.size
            found.custom_ids.append(custom_id)
            found.indexes.append(index)
            found.vectors.append(vector)
    return found, dims


def _custom_id(raw: str) -> str | None:
    """The ``custom_id`` of a line that did not read as an embedding line (None if the line
    is not even JSON with one: such a line is no embedding line to report)."""
    try:
        value = _decode_any(raw)
    except msgspec.DecodeError:
        return None
    custom_id = value.get("custom_id") if isinstance(value, dict) else None
    return custom_id if isinstance(custom_id, str) else None


def ingest_vectors(cur: duckdb.DuckDBPyConnection, job_id: str, raws: list[str]) -> int:
    """Stores the vectors of a batch of one job's result lines; returns how many.

    Idempotent: a vector already stored is kept (a success is final, so reading its line
    again gives the same vector), and a problem reported before is replaced.
    """
    row = cur.execute("SELECT dims FROM vector_jobs WHERE job_id = ?", [job_id]).fetchone()
    known = row[0] if row else None
    found, dims = decode_lines(raws, known)
    if found.problems:
        problems = pa.table(  # noqa: F841 (read by DuckDB by name)
            {
                "custom_id": [p[0] for p in found.problems],
                "input_index": pa.array([p[1] for p in found.problems], pa.int32()),
                "problem": [p[2] for p in found.problems],
            }
        )
        cur.execute(
            "INSERT OR REPLACE INTO vector_problems "
            "SELECT ?, custom_id, input_index, problem FROM problems",
            [job_id],
        )
    if not found.vectors or dims is None:
        return 0
    if known is None:
        cur.execute("INSERT OR REPLACE INTO vector_jobs VALUES (?, ?)", [job_id, dims])
    table = vector_table(dims)
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {table} (job_id VARCHAR, custom_id VARCHAR, "
        f"input_index INTEGER, norm FLOAT, vector FLOAT[{dims}], "
        "PRIMARY KEY (job_id, custom_id, input_index))"
    )
    matrix = np.stack(found.vectors)
    batch = pa.table(  # noqa: F841 (read by DuckDB by name)
        {
            "custom_id": found.custom_ids,
            "input_index": pa.array(found.indexes, pa.int32()),
            "norm": np.linalg.norm(matrix, axis=1),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), dims),
        }
    )
    cur.execute(
        f"INSERT OR IGNORE INTO {table} SELECT ?, custom_id, input_index, norm, vector FROM batch",
        [job_id],
    )
    # A line read well now (a retried request) clears what an earlier reading reported.
    cur.execute(
        "DELETE FROM vector_problems p USING batch b WHERE p.job_id = ? "
        "AND p.custom_id = b.custom_id AND p.input_index IN (b.input_index, -1)",
        [job_id],
    )
    return len(found.vectors)


def forget_vectors(cur: duckdb.DuckDBPyConnection, job_ids: list[str]) -> None:
    """Drops the vectors and problems of these jobs (their folders are gone)."""
    if not job_ids:
        return
    for (dims,) in cur.execute(
        "SELECT DISTINCT dims FROM vector_jobs WHERE list_contains(?, job_id)", [job_ids]
    ).fetchall():
        cur.execute(f"DELETE FROM {vector_table(dims)} WHERE list_contains(?, job_id)", [job_ids])
    for table in ("vector_problems", "vector_jobs"):
        cur.execute(f"DELETE FROM {table} WHERE list_contains(?, job_id)", [job_ids])
