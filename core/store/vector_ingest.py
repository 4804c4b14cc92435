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
table keeps its one row per request as for any endpoint; its ``raw`` line has each vector
that was stored left out (``"embedding": null``): the numbers are ~2 KB of every line, and
keeping them twice made ingest at scale half as fast (bench/vectors.py).
:func:`restore_vectors` puts them back, in the format each request asked for
(``encoding_format``), for the JSONL export and the detail view.
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
# What an embedding left out of a stored line reads as (msgspec writes no spaces).
_STRIPPED = '"embedding":null'


def vector_table(dims: int) -> str:
    """The table holding the vectors of ``dims`` dimensions (an int: safe in SQL)."""
    return f"vectors_{int(dims)}"


def vector_matrix(column: pa.ChunkedArray | pa.Array, dims: int) -> np.ndarray:
    """A column of FLOAT[dims] as an (n, dims) float32 matrix."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    values = column.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(values, dtype=np.float32).reshape(-1, dims)


def job_dims(cur: duckdb.DuckDBPyConnection, job_id: str) -> int | None:
    """The size of a job's stored vectors (None: it has none yet)."""
    row = cur.execute("SELECT dims FROM vector_jobs WHERE job_id = ?", [job_id]).fetchone()
    return row[0] if row else None


@dataclass
class DecodedVectors:
    """The vectors of a batch of result lines, in line order, and what could not be read
    (``input_index`` -1: the line as a whole)."""

    dims: int | None = None  # the job's vector size: its first vector's
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


def take_vectors(raws: list[str], dims: int | None) -> tuple[list[str], DecodedVectors]:
    """The vectors of the successful embedding lines among ``raws``, and the lines to keep
    as the results' ``raw``: each vector taken is left out of its line (``null``); every
    other line is unchanged.

    Args:
        raws: output lines of one job.
        dims: the job's vector size, None while it has no vector stored (its first vector
            then sets it). A vector of another size is a problem, kept in its line.

    Lines of other endpoints and failures carry no vector and pass through untouched.
    """
    found = DecodedVectors(dims=dims)
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
        taken = False
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
                found.dims = found.dims or vector.size
                if vector.size != found.dims:
                    raise ValueError(
                        f"the vector has {vector.size} dimensions; the job's have {found.dims}"
                    )
            except ValueError as exc:
                found.problems.append((custom_id, index, str(exc)))
                continue
            item["embedding"] = None
            taken = True
            found.custom_ids.append(custom_id)
            found.indexes.append(index)
            found.vectors.append(vector)
        if taken:
            kept[position] = _encode(line).decode("utf-8")
    return kept, found


def store_vectors(cur: duckdb.DuckDBPyConnection, job_id: str, found: DecodedVectors) -> int:
    """Stores one job's vectors read by :func:`take_vectors`, and its problems; returns how
    many vectors were new or already there.

    Idempotent: a vector already stored is kept (a success is final, so reading its line
    again gives the same vector), and a problem reported before is replaced.
    """
    keep, keys = [], set()
    for i in range(len(found.vectors)):  # the first line of a repeated id wins
        key = (found.custom_ids[i], found.indexes[i])
        if key not in keys:
            keys.add(key)
            keep.append(i)
    problems = found.problems
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
    dims = found.dims
    cur.execute("INSERT OR IGNORE INTO vector_jobs VALUES (?, ?)", [job_id, dims])
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


def restore_vectors(
    cur: duckdb.DuckDBPyConnection, job_ids: list[str], custom_ids: list[str], raws: list[str]
) -> list[str]:
    """Stored results lines (``raws``, of results ``(job_ids[i], custom_ids[i])``) with the
    vectors ingest left out put back: as float lists, or as base64 where the request asked
    for ``encoding_format: "base64"``. Lines without a vector left out come back as they are.
    """
    out = list(raws)
    wanted = [i for i, raw in enumerate(raws) if raw is not None and _STRIPPED in raw]
    if not wanted:
        return out
    keys = pa.table(  # noqa: F841 (read by DuckDB by name)
        {
            "position": pa.array(wanted, pa.int64()),
            "job_id": [job_ids[i] for i in wanted],
            "custom_id": [custom_ids[i] for i in wanted],
        }
    )
    found: dict[int, dict[int, Any]] = {}
    sizes = cur.execute(
        "SELECT DISTINCT dims FROM vector_jobs WHERE job_id IN (SELECT job_id FROM keys)"
    ).fetchall()
    for (dims,) in sizes:
        table = cur.execute(
            f"""
            SELECT k.position, v.input_index, v.vector,
                   q.params->>'$.encoding_format' = 'base64' AS base64
            FROM keys k
            JOIN {vector_table(dims)} v ON v.job_id = k.job_id AND v.custom_id = k.custom_id
            LEFT JOIN requests q ON q.job_id = k.job_id AND q.custom_id = k.custom_id
            """
        ).to_arrow_table()
        vectors = vector_matrix(table.column("vector"), dims)
        columns = zip(
            table.column("position").to_pylist(),
            table.column("input_index").to_pylist(),
            table.column("base64").to_pylist(),
            vectors,
            strict=True,
        )
        for position, index, as_base64, vector in columns:
            found.setdefault(position, {})[index] = (
                _as_base64(vector) if as_base64 else vector.tolist()
            )
    for position, embeddings in found.items():
        line = _decode(out[position])
        for order, item in enumerate(line["response"]["body"]["data"]):
            if item.get("embedding") is None:
                item["embedding"] = embeddings.get(item.get("index", order))
        out[position] = _encode(line).decode("utf-8")
    return out
