"""What the store answers about a job's embedding vectors (stored by
``core.store.vector_ingest``): a summary, "similar to this", near-duplicate pairs, a 2-D map,
and exports as Parquet or as a ``.npy`` matrix with its ids.

Similarity is cosine. "Similar to this" runs in DuckDB: ``array_cosine_similarity`` of
each stored vector with the query. ``array_inner_product`` over the stored norm measured
neither clearly faster nor slower on 100,000 384-d vectors (median 143 against 120 ms in
one run, 83 against 116 ms in another, on a busy 2-core machine). Near duplicates
and the map need every pair or a projection, which numpy does in blocks (BLAS) on vectors
read once from DuckDB.

Each input's text comes from the job's request line (``requests``): ``body.input`` is a
string (``prompt``) or a list of them (kept as JSON in ``messages``), the i-th input's text
being its i-th element; token-id inputs have no text (None).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from core.store.db import Store
from core.store.vector_ingest import job_dims, vector_matrix, vector_table

# The text of input ``v.input_index`` of request ``q``.
TEXT_SQL = """
    CASE WHEN json_type(q.messages) = 'ARRAY' THEN
        CASE WHEN json_type(q.messages, '$[' || v.input_index || ']') = 'VARCHAR'
             THEN q.messages->>('$[' || v.input_index || ']') END
    ELSE q.prompt END
"""
MAP_POINTS = 20_000
# Pairs are exact (every pair is compared); past this many vectors that takes too long for
# a page (100,000 vectors: ~5e9 pairs, about a minute on 2 cores), so it is refused.
NEAR_DUPLICATE_MAX_VECTORS = 200_000
# Each block of rows is compared with the rest in one matrix product of at most this many
# similarities (64 MiB of float32), whatever the job's size.
_BLOCK_CELLS = 16 * 1024 * 1024


class VectorError(ValueError):
    """A question about vectors the store cannot answer; the message says why."""


@dataclass(frozen=True)
class VectorSummary:
    """A job's vectors at a glance."""

    count: int
    dimensions: int | None
    norm_min: float | None
    norm_mean: float | None
    norm_max: float | None
    problems: int  # inputs whose vector could not be read


@dataclass(frozen=True)
class NearDuplicates:
    """Pairs of inputs at least ``threshold`` similar, most similar first."""

    # custom_id_a, input_index_a, custom_id_b, input_index_b, similarity, text_a, text_b
    pairs: pd.DataFrame
    found: int  # every pair at or above the threshold
    truncated: bool  # found > len(pairs): only the most similar are kept


@dataclass(frozen=True)
class VectorMap:
    """A 2-D projection (PCA) of a sample of a job's vectors, for a scatter plot."""

    points: pd.DataFrame  # x, y, custom_id, input_index, text, metadata
    explained: tuple[float, float]  # share of the sample's variance each axis carries
    total: int  # the job's vectors
    sampled: int  # len(points)


def job_dimensions(store: Store, job_id: str) -> int | None:
    """The size of a job's vectors (None: the job has none)."""
    with store.cursor() as cur:
        return job_dims(cur, job_id)


def _dimensions(store: Store, job_ids: list[str]) -> int:
    """The one vector size of these jobs; raises VectorError if none has vectors or they
    differ (vectors of different sizes cannot be compared)."""
    sizes = {job_id: job_dimensions(store, job_id) for job_id in job_ids}
    found = {d for d in sizes.values() if d is not None}
    if not found:
        raise VectorError(f"no vectors stored for {', '.join(job_ids)}")
    if len(found) > 1:
        raise VectorError(f"these jobs' vectors differ in size: {sizes}")
    return found.pop()


def vector_summary(store: Store, job_id: str) -> VectorSummary:
    """How many vectors a job has, their size, the range and mean of their norms (unit
    vectors give 1.0), and how many inputs have none because their line was unreadable."""
    dims = job_dimensions(store, job_id)
    with store.cursor() as cur:
        problems = cur.execute(
            "SELECT count(*) FROM vector_problems WHERE job_id = ?", [job_id]
        ).fetchone()[0]
        if dims is None:
            return VectorSummary(0, None, None, None, None, problems)
        count, low, mean, high = cur.execute(
            f"SELECT count(*), min(norm), avg(norm), max(norm) FROM {vector_table(dims)} "
            "WHERE job_id = ?",
            [job_id],
        ).fetchone()
    return VectorSummary(count, dims, low, mean, high, problems)


def vector_problems(store: Store, job_id: str) -> pd.DataFrame:
    """The inputs of a job whose vector could not be read, with why (input_index -1: the
    whole line)."""
    return store.query(
        "SELECT custom_id, input_index, problem FROM vector_problems WHERE job_id = ? "
        "ORDER BY custom_id, input_index",
        [job_id],
    )


def input_count(store: Store, job_id: str, custom_id: str) -> int:
    """How many vectors one request of a job has (a request may embed several inputs)."""
    dims = job_dimensions(store, job_id)
    if dims is None:
        return 0
    with store.cursor() as cur:
        return cur.execute(
            f"SELECT count(*) FROM {vector_table(dims)} WHERE job_id = ? AND custom_id = ?",
            [job_id, custom_id],
        ).fetchone()[0]


def stored_vector(store: Store, job_id: str, custom_id: str, input_index: int = 0) -> np.ndarray:
    """One stored vector as float32; raises VectorError if there is none."""
    dims = _dimensions(store, [job_id])
    with store.cursor() as cur:
        row = cur.execute(
            f"SELECT vector FROM {vector_table(dims)} "
            "WHERE job_id = ? AND custom_id = ? AND input_index = ?",
            [job_id, custom_id, input_index],
        ).fetchone()
    if row is None:
        raise VectorError(f"{custom_id} (input {input_index}) of {job_id} has no vector")
    return np.asarray(row[0], dtype=np.float32)


def similar_to_vector(
    store: Store,
    job_ids: str | list[str],
    vector: Any,
    k: int = 10,
    exclude: tuple[str, str, int] | None = None,
) -> pd.DataFrame:
    """The ``k`` stored vectors most similar (cosine) to ``vector``, most similar first.

    Args:
        job_ids: the job (or jobs, whose vectors share one size) to search.
        vector: the query, as many numbers as the vectors have dimensions.
        k: how many to return.
        exclude: ``(job_id, custom_id, input_index)`` left out (the query's own row).

    Returns:
        Columns job_id, custom_id, input_index, similarity, text.
    """
    job_ids = [job_ids] if isinstance(job_ids, str) else list(job_ids)
    dims = _dimensions(store, job_ids)
    query = np.asarray(vector, dtype=np.float32).ravel()
    if query.size != dims:
        raise VectorError(f"the query has {query.size} numbers; the vectors have {dims}")
    length = float(np.linalg.norm(query))
    if not np.isfinite(length) or length == 0:
        raise VectorError("the query vector is zero or not finite: no direction to compare")
    skip, skip_params = "", []
    if exclude:
        skip = "AND NOT (v.job_id = ? AND v.custom_id = ? AND v.input_index = ?)"
        skip_params = list(exclude)
    jobs = ", ".join("?" * len(job_ids))
    sql = f"""
        WITH top AS (
            SELECT v.job_id, v.custom_id, v.input_index,
                   array_cosine_similarity(v.vector, ?::FLOAT[{dims}]) AS similarity
            FROM {vector_table(dims)} v
            WHERE v.job_id IN ({jobs}) AND v.norm > 0 {skip}
            ORDER BY similarity DESC
            LIMIT ?
        )
        SELECT v.job_id, v.custom_id, v.input_index, v.similarity, {TEXT_SQL} AS text
        FROM top v LEFT JOIN requests q USING (job_id, custom_id)
        ORDER BY v.similarity DESC, v.job_id, v.custom_id, v.input_index
    """
    params = [(query / length).tolist(), *job_ids, *skip_params, int(k)]
    return store.query(sql, params)


def similar_to(
    store: Store,
    job_id: str,
    custom_id: str,
    input_index: int = 0,
    k: int = 10,
    within: list[str] | None = None,
) -> pd.DataFrame:
    """The ``k`` inputs most similar to a stored one (itself left out), in its job or in
    the jobs ``within``; columns as :func:`similar_to_vector`."""
    vector = stored_vector(store, job_id, custom_id, input_index)
    return similar_to_vector(
        store, within or [job_id], vector, k, exclude=(job_id, custom_id, input_index)
    )


def _job_matrix(store: Store, job_id: str) -> tuple[pd.DataFrame, np.ndarray]:
    """A job's keys (custom_id, input_index, text) and its vectors as an (n, d) float32
    matrix in the same order (input order)."""
    dims = _dimensions(store, [job_id])
    with store.cursor() as cur:
        table = cur.execute(
            f"""
            SELECT v.custom_id, v.input_index, {TEXT_SQL} AS text, v.vector
            FROM {vector_table(dims)} v LEFT JOIN requests q USING (job_id, custom_id)
            WHERE v.job_id = ?
            ORDER BY q.line_no NULLS LAST, v.custom_id, v.input_index
            """,
            [job_id],
        ).to_arrow_table()
    return table.drop(["vector"]).to_pandas(), vector_matrix(table.column("vector"), dims)


def near_duplicates(
    store: Store, job_id: str, threshold: float = 0.95, max_pairs: int = 10_000
) -> NearDuplicates:
    """Pairs of a job's inputs whose vectors are at least ``threshold`` similar (cosine).

    Exact: every pair is compared, as a blocked matrix product of the unit vectors (BLAS),
    never a Python loop over pairs; memory stays bounded by the block (64 MiB) plus the
    job's matrix. The answer is bounded too: of all pairs found (``found``), the
    ``max_pairs`` most similar are kept. Jobs past
    :data:`NEAR_DUPLICATE_MAX_VECTORS` vectors are refused (the cost grows with the square).
    """
    if not -1.0 <= threshold <= 1.0:
        raise VectorError(f"the threshold is a cosine similarity, -1 to 1, not {threshold}")
    keys, matrix = _job_matrix(store, job_id)
    n = len(matrix)
    if n > NEAR_DUPLICATE_MAX_VECTORS:
        raise VectorError(
            f"{job_id} has {n:,} vectors; near duplicates are computed exactly up to "
            f"{NEAR_DUPLICATE_MAX_VECTORS:,}"
        )
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    block = max(1, min(n, _BLOCK_CELLS // max(n, 1)))
    rows, cols, sims = [], [], []
    found, kept = 0, 0
    for start in range(0, n, block):
        scores = unit[start : start + block] @ unit[start:].T
        above = scores >= threshold
        # Only pairs (i, j) with i < j: this block's rows against themselves (the square's
        # upper triangle) and against every row after the block.
        size = len(scores)
        above[:, :size] &= np.triu(np.ones((size, size), dtype=bool), k=1)
        i, j = np.nonzero(above)
        found += len(i)
        rows.append(i + start)
        cols.append(j + start)
        sims.append(scores[i, j])
        kept += len(i)
        if kept > 2 * max_pairs:  # prune as we go, so memory stays bounded
            rows, cols, sims = _top(rows, cols, sims, max_pairs)
            kept = len(sims[0])
    rows, cols, sims = _top(rows, cols, sims, max_pairs)
    order = np.lexsort((cols[0], rows[0], -sims[0]))
    a, b = rows[0][order], cols[0][order]
    pairs = pd.DataFrame(
        {
            "custom_id_a": keys["custom_id"].to_numpy()[a],
            "input_index_a": keys["input_index"].to_numpy()[a],
            "custom_id_b": keys["custom_id"].to_numpy()[b],
            "input_index_b": keys["input_index"].to_numpy()[b],
            "similarity": sims[0][order].astype(float),
            "text_a": keys["text"].to_numpy()[a],
            "text_b": keys["text"].to_numpy()[b],
        }
    )
    return NearDuplicates(pairs, found, found > len(pairs))


def _top(
    rows: list[np.ndarray], cols: list[np.ndarray], sims: list[np.ndarray], keep: int
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """The ``keep`` most similar of the pairs gathered so far, as one array each."""
    r, c, s = (np.concatenate(x) if x else np.empty(0) for x in (rows, cols, sims))
    r, c = r.astype(np.int64), c.astype(np.int64)
    s = s.astype(np.float32)
    if len(s) > keep:
        best = np.argpartition(-s, keep - 1)[:keep] if keep > 0 else np.empty(0, np.int64)
        r, c, s = r[best], c[best], s[best]
    return [r], [c], [s]


def vector_map(store: Store, job_id: str, max_points: int = MAP_POINTS, seed: int = 0) -> VectorMap:
    """A job's vectors projected on their first two principal components.

    At most ``max_points`` vectors are used (a scatter of more tells no more and costs the
    browser), chosen by a seeded hash of their keys: the same seed gives the same sample
    and the same map. Each axis's sign is fixed (its largest loading positive), so a map
    redrawn from the same sample does not flip.
    """
    dims = _dimensions(store, [job_id])
    with store.cursor() as cur:
        total = cur.execute(
            f"SELECT count(*) FROM {vector_table(dims)} WHERE job_id = ?", [job_id]
        ).fetchone()[0]
        table = cur.execute(
            f"""
            WITH pick AS (
                SELECT custom_id, input_index, vector,
                       hash(custom_id, input_index, ?) AS rank
                FROM {vector_table(dims)} WHERE job_id = ?
                ORDER BY rank LIMIT ?
            )
            SELECT v.custom_id, v.input_index, {TEXT_SQL} AS text,
                   CAST(q.metadata AS VARCHAR) AS metadata, v.vector
            FROM pick v LEFT JOIN requests q ON q.job_id = ? AND q.custom_id = v.custom_id
            ORDER BY v.rank
            """,
            [int(seed), job_id, int(max_points), job_id],
        ).to_arrow_table()
    points = table.drop(["vector"]).to_pandas()
    matrix = vector_matrix(table.column("vector"), dims).astype(np.float64)
    centred = matrix - matrix.mean(axis=0) if len(matrix) else matrix
    if len(matrix) >= 2:
        values, axes = np.linalg.eigh(centred.T @ centred)  # ascending
        values, axes = values[::-1][:2], axes[:, ::-1][:, :2]
        signs = np.sign(axes[np.abs(axes).argmax(axis=0), range(axes.shape[1])])
        axes *= np.where(signs == 0, 1, signs)
        xy = centred @ axes
        spread = float(np.clip(np.linalg.eigvalsh(centred.T @ centred), 0, None).sum())
        explained = tuple(float(v / spread) if spread > 0 else 0.0 for v in values)
    else:
        xy, explained = np.zeros((len(matrix), 2)), (0.0, 0.0)
    points.insert(0, "y", xy[:, 1] if len(xy) else [])
    points.insert(0, "x", xy[:, 0] if len(xy) else [])
    return VectorMap(points, (explained[0], explained[1]), total, len(points))


def _export_sql(dims: int) -> str:
    return f"""
        SELECT v.job_id, v.custom_id, v.input_index, {TEXT_SQL} AS text, v.vector
        FROM {vector_table(dims)} v LEFT JOIN requests q USING (job_id, custom_id)
        WHERE v.job_id = ?
        ORDER BY q.line_no NULLS LAST, v.custom_id, v.input_index
    """


def export_vectors_parquet(store: Store, job_id: str, path: Path) -> int:
    """Writes a job's vectors (job_id, custom_id, input_index, text, vector) to Parquet in
    input order; the vector column is a fixed-size float list. Returns the row count."""
    dims = _dimensions(store, [job_id])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    target = "'" + str(path).replace("'", "''") + "'"  # COPY takes no parameter here
    # Row groups of 8,192 vectors (12 MiB at 384-d): the default 122,880 rows buffer more
    # than the store's memory limit allows (measured: out of memory at 100,000 vectors).
    with store.cursor() as cur:  # a read: no write waits for it
        cur.execute(
            f"COPY ({_export_sql(dims)}) TO {target} (FORMAT parquet, ROW_GROUP_SIZE 8192)",
            [job_id],
        )
    return vector_summary(store, job_id).count


def export_vectors_npy(store: Store, job_id: str, path: Path) -> tuple[Path, Path]:
    """Writes a job's vectors as an (n, d) float32 ``.npy`` matrix and, beside it, a CSV of
    each row's ids (row, custom_id, input_index, text) in the same order.

    The rows stream from DuckDB into a memory-mapped file, so a job larger than memory is
    exported too. Returns the two paths (``X.npy`` and ``X.ids.csv``).
    """
    dims = _dimensions(store, [job_id])
    path = Path(path).with_suffix(".npy")
    ids_path = path.with_suffix(".ids.csv")
    path.parent.mkdir(parents=True, exist_ok=True)
    count = vector_summary(store, job_id).count
    matrix = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(count, dims))
    row = 0
    with store.cursor() as cur:
        reader = cur.execute(_export_sql(dims), [job_id]).to_arrow_reader(50_000)
        with pa_csv.CSVWriter(ids_path, _IDS_SCHEMA) as ids:
            for batch in reader:
                n = batch.num_rows
                matrix[row : row + n] = vector_matrix(batch.column("vector"), dims)
                ids.write_table(
                    pa.table(
                        {
                            "row": pa.array(range(row, row + n), pa.int64()),
                            "custom_id": batch.column("custom_id"),
                            "input_index": batch.column("input_index"),
                            "text": batch.column("text"),
                        },
                        schema=_IDS_SCHEMA,
                    )
                )
                row += n
    matrix.flush()
    del matrix
    if row != count:  # ingest ran between the count and the read: never a silent mismatch
        raise VectorError(f"{job_id} changed during the export ({row} rows, not {count})")
    return path, ids_path


def export_vectors_npy_zip(store: Store, job_id: str, path: Path) -> Path:
    """:func:`export_vectors_npy`'s two files in one zip (``vectors.npy`` and
    ``vectors.ids.csv``), for a download of one file. Returns the zip's path."""
    path = Path(path).with_suffix(".zip")
    npy, ids = export_vectors_npy(store, job_id, path.with_suffix(".npy"))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bundle:
        bundle.write(npy, "vectors.npy")
        bundle.write(ids, "vectors.ids.csv")
    npy.unlink()
    ids.unlink()
    return path


_IDS_SCHEMA = pa.schema(
    [("row", pa.int64()), ("custom_id", pa.string()), ("input_index", pa.int32()),
     ("text", pa.string())]
)  # fmt: skip
