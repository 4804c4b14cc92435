"""Embedding vectors in the store: ingest speed, "similar to this", near duplicates, the map
and the exports, on 384-d vectors (all-MiniLM-L6-v2's size).

    .venv/bin/python bench/vectors.py [--lines 20000] [--vectors 100000] [--pairs 20000]

Job folders are written as the worker writes them (chained output lines in OpenAI's batch
format) and ingested as the app does: one job of float-list lines and one of base64 lines
(``--lines`` each), then a job of ``--vectors`` lines for the queries. "Similar to this"
is timed on the product's query (``array_cosine_similarity``) and, in the same run, on
``array_inner_product`` over the stored norm and on a copy of the table stored with DuckDB's
default float compression (what the store turns off), as baselines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import duckdb
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scratch import scratch_folder  # noqa: E402
from core.jobs.folder import JobFolder, create_job  # noqa: E402
from core.jobs.ledger import combined_lines  # noqa: E402
from core.jobs.output_file import OutputWriter  # noqa: E402
from core.run.outputs import Embeddings, success_line  # noqa: E402
from core.schemas import EngineConfig, JobStatus  # noqa: E402

EMBED = "/v1/embeddings"
from core.store import vectors as V  # noqa: E402
from core.store.db import Store  # noqa: E402
from core.store.export import export_results  # noqa: E402
from core.store.results import ResultFilter  # noqa: E402

DIMS = 384
WORDS = ("refund", "invoice", "delivery", "broken", "login", "password", "export", "slow",
         "late", "charge")  # fmt: skip


def embedding_job(work: Path, name: str, n: int, fmt: str) -> JobFolder:
    """A job of ``n`` single-input /v1/embeddings requests asking for ``fmt`` (float or
    base64), before any result."""
    batch = work / f"{name}.jsonl"
    with batch.open("w") as out:
        for i in range(n):
            text = f"ticket {i}: " + " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(12))
            body = {"model": "text-embedding-3-small", "input": text, "encoding_format": fmt}
            out.write(json.dumps({"custom_id": f"{name}-{i}", "method": "POST",
                                  "url": "/v1/embeddings", "body": body}) + "\n")  # fmt: skip
    return create_job(batch, work / "jobs", EngineConfig(model="/models/all-MiniLM-L6-v2"))


def write_results(job: JobFolder, name: str, n: int, fmt: str, seed: int) -> None:
    """Random unit vectors for every request, as float lists or base64, as the worker
    writes them (chained lines, then the final status)."""
    rng = np.random.default_rng(seed)
    with OutputWriter(job.output) as output:
        for start in range(0, n, 1000):
            chunk = rng.standard_normal((min(1000, n - start), DIMS)).astype(np.float32)
            chunk /= np.linalg.norm(chunk, axis=1, keepdims=True)
            output.write(line(f"{name}-{start + i}", vector, fmt) for i, vector in enumerate(chunk))
    job.write_status(JobStatus(state="completed", total=n, done=n))


def line(custom_id: str, vector: np.ndarray, fmt: str) -> dict:
    """The output line the worker writes for one text (the product's own line builder)."""
    return success_line(custom_id, "all-MiniLM-L6-v2", Embeddings(16, [vector], fmt), EMBED)


def timed_ingest(
    store: Store, work: Path, name: str, n: int, fmt: str, seed: int
) -> tuple[JobFolder, int, float]:
    """A job ingested as the app does: its requests when it starts, then its results,
    timed (the figure is the result lines')."""
    job = embedding_job(work, name, n, fmt)
    store.ingest(job)
    write_results(job, name, n, fmt, seed)
    started = time.perf_counter()
    rows = store.ingest(job)
    return job, rows, time.perf_counter() - started


def ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1000:.0f} ms, max {max(samples) * 1000:.0f} ms"


def time_queries(run, queries: int = 15) -> list[float]:
    run(0)  # a first query reads the table into DuckDB's buffer
    samples = []
    for q in range(queries):
        started = time.perf_counter()
        run(q)
        samples.append(time.perf_counter() - started)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=20_000)
    args = parser.parse_args()
    work = scratch_folder("vectors-")
    store = Store(work / "studio.duckdb")

    for fmt in ("float", "base64"):
        _, rows, seconds = timed_ingest(store, work, f"ingest-{fmt}", args.lines, fmt, seed=1)
        print(f"ingest, {fmt} lines: {rows:,} lines in {seconds:.2f} s "
              f"= {rows / seconds:,.0f} lines/s")  # fmt: skip
    job, rows, seconds = timed_ingest(store, work, "big", args.vectors, "base64", seed=2)
    print(f"ingest, {rows:,} base64 lines into a store holding {2 * args.lines:,}: "
          f"{seconds:.1f} s = {rows / seconds:,.0f} lines/s")  # fmt: skip
    job_id = job.job_id
    summary = V.vector_summary(store, job_id)
    print(f"summary: {summary.count:,} vectors of {summary.dimensions} dims, "
          f"norms {summary.norm_min:.4f}..{summary.norm_max:.4f}")  # fmt: skip

    rng = np.random.default_rng(7)
    queries = rng.standard_normal((20, DIMS)).astype(np.float32)
    ids = [f"big-{i}" for i in rng.integers(0, args.vectors, 20)]
    given = time_queries(lambda q: V.similar_to_vector(store, job_id, queries[q], k=10))
    stored = time_queries(lambda q: V.similar_to(store, job_id, ids[q], k=10))
    print(f"similar to a given vector, {args.vectors:,} vectors, k=10: {ms(given)}")
    print(f"similar to a stored vector, {args.vectors:,} vectors, k=10: {ms(stored)}")

    table = f"vectors_{DIMS}"
    inner_sql = (
        f"SELECT custom_id, array_inner_product(vector, ?::FLOAT[{DIMS}]) / norm AS s "
        f"FROM {table} WHERE job_id = ? ORDER BY s DESC LIMIT 10"
    )
    inner = time_queries(lambda q: store.query(inner_sql, [queries[q].tolist(), job_id]))
    print(f"  baseline, array_inner_product / norm on the same table: {ms(inner)}")
    compressed_path = work / "compressed.duckdb"
    with store.cursor() as cur:
        rows = cur.execute(f"SELECT * FROM {table} WHERE job_id = ?", [job_id]).to_arrow_table()
    other = duckdb.connect(str(compressed_path), config={"memory_limit": "512MB"})
    other.execute(f"CREATE TABLE {table} AS SELECT * FROM rows")
    other.execute("CHECKPOINT")
    codecs = other.execute(
        f"SELECT string_agg(DISTINCT compression, ',') FROM pragma_storage_info('{table}') "
        "WHERE segment_type = 'FLOAT'"
    ).fetchone()[0]
    ip_sql = (
        f"SELECT custom_id, array_cosine_similarity(vector, ?::FLOAT[{DIMS}]) AS s "
        f"FROM {table} WHERE job_id = ? ORDER BY s DESC LIMIT 10"
    )
    squeezed = time_queries(
        lambda q: other.execute(ip_sql, [queries[q].tolist(), job_id]).fetchall()
    )
    print(f"  baseline, the same query with DuckDB's default float codecs ({codecs}): "
          f"{ms(squeezed)}")  # fmt: skip
    other.close()

    started = time.perf_counter()
    picture = V.vector_map(store, job_id, max_points=20_000)
    print(f"map: PCA of {picture.sampled:,} of {picture.total:,} vectors in "
          f"{time.perf_counter() - started:.2f} s")  # fmt: skip
    started = time.perf_counter()
    rows = V.export_vectors_parquet(store, job_id, work / "out" / "vectors.parquet")
    parquet_s = time.perf_counter() - started
    started = time.perf_counter()
    V.export_vectors_npy(store, job_id, work / "out" / "vectors.npy")
    print(f"export of {rows:,} vectors: Parquet {parquet_s:.2f} s, "
          f".npy + ids {time.perf_counter() - started:.2f} s")  # fmt: skip
    target = work / "out" / "big.jsonl"
    started = time.perf_counter()
    lines = export_results(store, ResultFilter(job_ids=[job_id]), target, "jsonl")
    print(f"JSONL export of {lines:,} lines, vectors put back from the store: "
          f"{time.perf_counter() - started:.2f} s")  # fmt: skip
    with target.open("rb") as exported:
        same = all(
            json.loads(ours) == json.loads(theirs)
            for ours, theirs in zip(exported, combined_lines(job), strict=True)
        )
    print(f"  every exported line equals the job's own output line: {same}")

    pairs_job, _, _ = timed_ingest(store, work, "pairs", args.pairs, "base64", seed=3)
    started = time.perf_counter()
    found = V.near_duplicates(store, pairs_job.job_id, threshold=0.5, max_pairs=1000)
    seconds = time.perf_counter() - started
    print(f"near duplicates of {args.pairs:,} vectors (every pair, {args.pairs ** 2 / 2:,.0f}): "
          f"{seconds:.2f} s; {found.found:,} pairs >= 0.5, {len(found.pairs):,} kept")  # fmt: skip


if __name__ == "__main__":
    main()
