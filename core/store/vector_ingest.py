"""Embedding result lines into DuckDB: one fixed-size ``FLOAT[dim]`` row per input.

A ``/v1/embeddings`` output line carries ``response.body.data``: one item per input of the
request (``index`` 0..k-1), each with its ``embedding`` as a list of floats or as base64 of
little-endian float32 (``encoding_format: "base64"``). Ingest keeps each vector once, keyed
by ``(job_id, custom_id, input_index)``, in a table per dimension (``vectors_384``): DuckDB's
array functions need arrays of one fixed size, and a fixed-size array is stored and scanned
without list offsets. A job's vectors share one dimension (the first vector ingested sets
it, in ``vector_jobs``).

:func:`take_vectors` reads the lines in Python (msgspec; decoding base64 is beyond DuckDB's
JSON functions), each on its own: a line whose embedding cannot be read becomes a row of
``vector_problems`` naming the line and why, and the job's other lines go on. The results
table keeps its one row per request as for any endpoint, and its ``raw`` line has each
embedding as base64: the same float32 values in a quarter of the text (a 384-d float list
is ~8 KB of digits; storing it twice made ingest 4x slower than the vectors alone).
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

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
# Present in every embedding output line, and in a chat line only by rare coincidence: lines
# without it are passed over before any parsing (a chat job's ingest pays one substring
# search a line).
_MARKER = '"embedding"'


def vector_table(dims: int) -> str:
    """The table holding the vectors of ``dims`` dimensions (an int: safe in SQL)."""
    return f"vectors_{int(dims)}"


@dataclass
class DecodedVectors:
    """The vectors of a batch of result lines, in line order, and what could not be read
    (``input_index`` -1: the line as a whole)."""

    custom_ids: list[str] = field(default_factory=list)
    indexes: list[int] = field(default_factory=list)
    vectors: list[np.ndarray] = field(default_factory=list)
    problems: list[tuple[str, int, str]] = field(default_factory=list)  # (id, index, why)


def _vector(embedding: Any) -> np.ndarray:
    """One embedding as float32; raises ValueError saying what is wrong with it."""
    if isinstance(embedding, str):
        try:
            raw = base64.b64decode(embedding, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"the embedding is not valid base64 ({exc})") from None
        if len(raw) % 4:
            raise ValueError(f"the base64 embedding has {len(raw)} bytes, not float32s")
        vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    elif isinstance(embedding, list):
        # numpy infers float64 or int64 from numbers alone; anything else (text, booleans,
        # nested lists, null) gives another kind or fails, without a Python loop here.
        try:
            parsed = np.asarray(embedding)
        except ValueError:
            parsed = None
        if parsed is None or parsed.ndim != 1 or parsed.dtype.kind not in "fi":
            raise ValueError("the embedding holds something other than numbers")
        vector = parsed.astype(np.float32)
    else:
        raise ValueError(f"the embedding is a {type(embedding).__name__}, not numbers or base64")
    if vector.size == 0:
        raise ValueError("the embedding is empty")
    if not np.isfinite(vector).all():
        raise ValueError("the embedding holds NaN or infinity (or numbers past float32)")
    return vector


def _as_base64(vector: np.ndarray) -> str:
    return base64.b64encode(vector.astype("<f4", copy=False).tobytes()).decode("ascii")


def take_vectors(raws: list[str]) -> tuple[list[str], DecodedVectors]:
    """The vectors of the successful embedding lines among ``raws``, and the lines to keep
    as the results' ``raw`` (embedding lines with their float lists made base64; every
    other line unchanged).

    Lines of other endpoints and failures carry no vector and pass through untouched.
    """
    found = DecodedVectors()
    kept = list(raws)
    for position, raw in enumerate(raws):
        if _MARKER not in raw:
            continue
        try:
            line = _decode(raw)
            body = line["response"]["body"] if line.get("error") is None else None
        except (msgspec.DecodeError, AttributeError, KeyError, TypeError):
            continue  # not an embedding line (the results' ingest reports a broken line)
        if not isinstance(body, dict) or body.get("object") != "list":
            continue
        custom_id = line.get("custom_id")
        custom_id = custom_id if isinstance(custom_id, str) else "(no custom_id)"
        data = body.get("data")
        if not isinstance(data, list) or not data or not all(isinstance(d, dict) for d in data):
            found.problems.append((custom_id, -1, "the line's data holds no embeddings"))
            continue
        seen: set[int] = set()
        rewritten = False
        for order, item in enumerate(data):
            index = item.get("index", order)
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                found.problems.append((custom_id, order, f"input {order} has index {index!r}"))
                continue
            try:
                if index in seen:
                    raise ValueError(f"input {index} appears twice in the line")
                seen.add(index)
                vector = _vector(item.get("embedding"))
            except ValueError as exc:
                found.problems.append((custom_id, index, str(exc)))
                continue
            if isinstance(item["embedding"], list):
                item["embedding"] = _as_base64(vector)
                rewritten = True
            found.custom_ids.append(custom_id)
            found.indexes.append(index)
            found.vectors.append(vector)
        if rewritten:
            kept[position] = _encode(line).decode("utf-8")
    return kept, found


def store_vectors(cur: duckdb.DuckDBPyConnection, job_id: str, found: DecodedVectors) -> int:
    """Stores one job's vectors read by :func:`take_vectors`, and its problems; returns how
    many vectors were new or already there.

    Idempotent: a vector already stored is kept (a success is final, so reading its line
    again gives the same vector), and a problem reported before is replaced. A vector
    whose size differs from the job's becomes a problem.
    """
    row = cur.execute("SELECT dims FROM vector_jobs WHERE job_id = ?", [job_id]).fetchone()
    dims = row[0] if row else (found.vectors[0].size if found.vectors else None)
    keep, keys = [], set()
    for i, vector in enumerate(found.vectors):  # the first line of a repeated id wins
        key = (found.custom_ids[i], found.indexes[i])
        if vector.size == dims and key not in keys:
            keys.add(key)
            keep.append(i)
    problems = list(found.problems)
    problems += [
        (found.custom_ids[i], found.indexes[i],
         f"the vector has {v.size} dimensions; the job's have {dims}")
        for i, v in enumerate(found.vectors) if v.size != dims
    ]  # fmt: skip
    if problems:
        rows = pa.table(  # noqa: F841 (read by DuckDB by name)
            {
                "custom_id": [p[0] for p in problems],
                "input_index": pa.array([p[1] for p in problems], pa.int32()),
                "problem": [p[2] for p in problems],
            }
        )
        cur.execute(
            "INSERT OR REPLACE INTO vector_problems "
            "SELECT ?, custom_id, input_index, problem FROM rows",
            [job_id],
        )
    if not keep:
        return 0
    if row is None:
        cur.execute("INSERT OR REPLACE INTO vector_jobs VALUES (?, ?)", [job_id, dims])
    table = vector_table(dims)
    # No primary key: checking one on every insert cost a third more than this anti-join
    # against the job's stored keys (bench/vectors.py), which keeps ingest idempotent alike.
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {table} (job_id VARCHAR, custom_id VARCHAR, "
        f"input_index INTEGER, norm FLOAT, vector FLOAT[{dims}])"
    )
    matrix = np.stack([found.vectors[i] for i in keep])
    batch = pa.table(  # noqa: F841 (read by DuckDB by name)
        {
            "custom_id": [found.custom_ids[i] for i in keep],
            "input_index": pa.array([found.indexes[i] for i in keep], pa.int32()),
            "norm": np.linalg.norm(matrix, axis=1),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), dims),
        }
    )
    cur.execute(
        f"""
        INSERT INTO {table}
        SELECT ?, b.custom_id, b.input_index, b.norm, b.vector
        FROM batch b ANTI JOIN (SELECT custom_id, input_index FROM {table} WHERE job_id = ?) s
            ON s.custom_id = b.custom_id AND s.input_index = b.input_index
        """,
        [job_id, job_id],
    )
    # A line read well now (a retried request) clears what an earlier reading reported.
    if cur.execute("SELECT 1 FROM vector_problems WHERE job_id = ? LIMIT 1", [job_id]).fetchone():
        cur.execute(
            "DELETE FROM vector_problems p USING batch b WHERE p.job_id = ? "
            "AND p.custom_id = b.custom_id AND p.input_index IN (b.input_index, -1)",
            [job_id],
        )
    return len(keep)


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
