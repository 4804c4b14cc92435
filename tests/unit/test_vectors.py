"""Embedding results in the store: vectors ingested from job folders, then searched,
paired, mapped and exported."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from core.jobs.folder import JobFolder, create_job
from core.jobs.output_file import OutputWriter
from core.run.outputs import error_line
from core.schemas import EngineConfig, JobStatus
from core.store import results as R
from core.store import vectors as V
from core.store.db import Store
from core.store.export import export_results
from core.store.schema import MIGRATIONS


def b64(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


def embedding_line(custom_id: str, embeddings: list[Any]) -> dict[str, Any]:
    """An output line of /v1/embeddings as OpenAI's batch API writes it."""
    data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(embeddings)]
    body = {
        "object": "list",
        "data": data,
        "model": "all-MiniLM-L6-v2",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    return {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": {"status_code": 200, "request_id": f"req_{uuid.uuid4().hex}", "body": body},
        "error": None,
    }


def embedding_job(
    folder: Path,
    inputs: dict[str, str | list[str]],
    lines: list[dict[str, Any]],
    base64_ids: frozenset[str] = frozenset(),
) -> JobFolder:
    """A job folder of /v1/embeddings requests (``inputs``: custom_id -> body.input; those
    in ``base64_ids`` ask for ``encoding_format: "base64"``) whose worker wrote ``lines``
    (failures go to errors.jsonl, as the worker puts them)."""
    folder.mkdir(parents=True, exist_ok=True)
    batch = folder / "embed.jsonl"
    batch.write_text(
        "".join(
            json.dumps(
                {
                    "custom_id": cid,
                    "method": "POST",
                    "url": "/v1/embeddings",
                    "body": {
                        "model": "text-embedding-3-small",
                        "input": text,
                        **({"encoding_format": "base64"} if cid in base64_ids else {}),
                    },
                }
            )
            + "\n"
            for cid, text in inputs.items()
        ),
        encoding="utf-8",
    )
    job = create_job(batch, folder / "jobs", EngineConfig(model="/models/all-MiniLM-L6-v2"))
    with OutputWriter(job.output) as output, OutputWriter(job.errors) as errors:
        output.write(line for line in lines if line.get("error") is None)
        errors.write(line for line in lines if line.get("error") is not None)
    job.write_status(JobStatus(state="completed", total=len(inputs), done=len(inputs)))
    return job


def unit_rows(n: int, dims: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, dims)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def random_job(tmp_path: Path, n: int, dims: int, seed: int = 0) -> tuple[Store, str, np.ndarray]:
    """A store holding one job of ``n`` single-input requests with random vectors, half
    written as float lists and half as base64."""
    matrix = unit_rows(n, dims, seed) * np.float32(1.5)  # not unit: cosine must normalise
    inputs = {f"r{i:04d}": f"text number {i}" for i in range(n)}
    lines = [
        embedding_line(cid, [matrix[i].tolist() if i % 2 else b64(matrix[i])])
        for i, cid in enumerate(inputs)
    ]
    job = embedding_job(tmp_path / "work", inputs, lines)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    return store, job.job_id, matrix


def stored(store: Store, job_id: str) -> dict[tuple[str, int], np.ndarray]:
    dims = V.job_dimensions(store, job_id)
    frame = store.query(
        f"SELECT custom_id, input_index, vector FROM vectors_{dims} WHERE job_id = ?", [job_id]
    )
    return {
        (row.custom_id, row.input_index): np.asarray(row.vector, dtype=np.float32)
        for row in frame.itertuples()
    }


def test_float_and_base64_lines_store_the_same_vector_and_one_result_row(tmp_path):
    vector = unit_rows(1, 384)[0]
    inputs = {"as-floats": "refund request", "as-base64": "refund request"}
    lines = [
        embedding_line("as-floats", [vector.tolist()]),
        embedding_line("as-base64", [b64(vector)]),
    ]
    job = embedding_job(tmp_path, inputs, lines, base64_ids=frozenset({"as-base64"}))
    store = Store(tmp_path / "studio.duckdb")
    assert store.ingest(job) == 2
    vectors = stored(store, job.job_id)
    np.testing.assert_array_equal(vectors[("as-floats", 0)], vector)
    np.testing.assert_array_equal(vectors[("as-base64", 0)], vector)
    results = store.query("SELECT custom_id, status, answer, prompt, prompt_tokens FROM results")
    assert sorted(results["answer"]) == ["384-d vector", "384-d vector"]
    assert set(results["status"]) == {"succeeded"} and set(results["prompt_tokens"]) == {7}
    assert set(results["prompt"]) == {"refund request"}
    # The results row keeps the line without its vector (held once, in the vector table)...
    raw = json.loads(store.query("SELECT raw FROM results WHERE custom_id = 'as-floats'")["raw"][0])
    assert raw["response"]["body"]["data"][0]["embedding"] is None
    # ...and the detail view and the JSONL export give back the line the worker wrote, each
    # vector in the format its request asked for.
    # (The writer chains each line to the one before; the chain is not the worker's.)
    unchained = lambda line: {k: v for k, v in line.items() if k != "chain_sha256"}  # noqa: E731
    for line in lines:
        assert unchained(R.detail(store, job.job_id, line["custom_id"])["raw"]) == line
    out = tmp_path / "out.jsonl"
    assert export_results(store, R.ResultFilter(job_ids=[job.job_id]), out, "jsonl") == 2
    exported = [unchained(json.loads(text)) for text in out.read_text().splitlines()]
    assert exported == lines  # in input order
    summary = V.vector_summary(store, job.job_id)
    assert (summary.count, summary.dimensions, summary.problems) == (2, 384, 0)
    assert summary.norm_min == pytest.approx(1.0, abs=1e-5)
    assert summary.norm_max == pytest.approx(1.0, abs=1e-5)


def test_a_request_of_several_inputs_keeps_each_vector_with_its_own_text(tmp_path):
    matrix = unit_rows(3, 16)
    inputs = {"many": ["first text", "second text", "third text"], "one": "lonely text"}
    lines = [
        embedding_line("many", [matrix[0].tolist(), matrix[1].tolist(), matrix[2].tolist()]),
        embedding_line("one", [b64(matrix[0])]),
    ]
    job = embedding_job(tmp_path, inputs, lines)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    vectors = stored(store, job.job_id)
    assert sorted(vectors) == [("many", 0), ("many", 1), ("many", 2), ("one", 0)]
    np.testing.assert_array_equal(vectors[("many", 2)], matrix[2])
    answers = dict(store.query("SELECT custom_id, answer FROM results").values.tolist())
    assert answers == {"many": "3 × 16-d vectors", "one": "16-d vector"}
    found = V.similar_to(store, job.job_id, "one", k=3)
    # "one" holds the same vector as input 0 of "many": its twin comes first, with its text.
    first = found.iloc[0]
    assert [first["custom_id"], first["input_index"], first["text"]] == ["many", 0, "first text"]
    assert found.iloc[0]["similarity"] == pytest.approx(1.0, abs=1e-5)
    assert set(found["text"]) == {"first text", "second text", "third text"}


def test_a_search_finds_any_text_of_a_request_of_several_inputs(tmp_path):
    matrix = unit_rows(3, 8)
    inputs = {"many": ["Refund please", "Parcel late", "Login broken"], "ids": [[1, 2], [3]]}
    lines = [
        embedding_line("many", [m.tolist() for m in matrix]),
        embedding_line("ids", [matrix[0].tolist(), matrix[1].tolist()]),
    ]
    job = embedding_job(tmp_path, inputs, lines)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    for text in ("parcel late", "LOGIN", "refund"):
        found = R.page(store, R.ResultFilter(job_ids=[job.job_id], search=text))
        assert list(found["custom_id"]) == ["many"], text
    found = R.page(store, R.ResultFilter(job_ids=[job.job_id], search="Parcel", match_case=True))
    assert found["prompt"][0] == "Refund please\nParcel late\nLogin broken"
    # token ids are no text: nothing to find, nothing made up
    assert R.page(store, R.ResultFilter(job_ids=[job.job_id], search="1")).empty


def test_an_older_store_reads_its_embeddings_jobs_again_on_upgrade(tmp_path):
    vector = unit_rows(1, 8)[0]
    lines = [embedding_line("many", [vector.tolist(), vector.tolist()])]
    job = embedding_job(tmp_path, {"many": ["first text", "second text"]}, lines)
    path = tmp_path / "studio.duckdb"
    store = Store(path)
    store.ingest(job)
    # As the previous version left it: no prompt for a list of texts, and the vectors kept
    # in the stored line as base64 (a float request exported them so).
    old_line = embedding_line("many", [b64(vector), b64(vector)])
    store.execute("UPDATE requests SET prompt = NULL, prompt_lower = NULL")
    store.execute(
        "UPDATE results SET prompt = NULL, search_text = lower(answer), raw = ?",
        [json.dumps(old_line)],
    )
    version = next(n for n, sql in enumerate(MIGRATIONS, 1) if "FROM vector_jobs)" in sql)
    store.execute("DELETE FROM schema_migrations WHERE version >= ?", [version])
    store.close()
    store = Store(path)
    store.ingest(job)  # what the app does next, on its own
    found = R.page(store, R.ResultFilter(job_ids=[job.job_id], search="second text"))
    assert list(found["custom_id"]) == ["many"]
    raw = R.detail(store, job.job_id, "many")["raw"]
    assert [d["embedding"] for d in raw["response"]["body"]["data"]] == [vector.tolist()] * 2
    assert len(stored(store, job.job_id)) == 2


def test_a_failed_request_has_no_vector_but_keeps_its_error(tmp_path):
    vector = unit_rows(1, 8)[0]
    inputs = {"ok": "fine", "bad": "x" * 5000}
    lines = [
        embedding_line("ok", [vector.tolist()]),
        error_line("bad", "engine_rejected", "input is longer than 256 tokens"),
    ]
    job = embedding_job(tmp_path, inputs, lines)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    assert sorted(stored(store, job.job_id)) == [("ok", 0)]
    failed = store.query("SELECT status, error_message FROM results WHERE custom_id = 'bad'")
    assert failed.values.tolist() == [["failed", "input is longer than 256 tokens"]]
    assert V.vector_summary(store, job.job_id).count == 1
    with pytest.raises(V.VectorError, match=r"bad \(input 0\) of .* has no vector"):
        V.similar_to(store, job.job_id, "bad")


def test_ingesting_again_changes_nothing(tmp_path):
    store, job_id, _ = random_job(tmp_path, 40, 12)
    job = JobFolder(tmp_path / "work" / "jobs" / job_id)
    before = stored(store, job_id)
    assert store.ingest(job) == 0  # nothing new
    # Read every line again (as after a repaired file or a migration): still one per input.
    store.execute("UPDATE ingest_state SET output_offset = 0, errors_offset = 0")
    assert store.ingest(job) == 40
    after = stored(store, job_id)
    assert sorted(after) == sorted(before) and len(after) == 40
    for key, vector in before.items():
        np.testing.assert_array_equal(after[key], vector)
    assert store.query("SELECT count(*) AS n FROM results")["n"][0] == 40


def test_a_malformed_embedding_line_is_its_own_problem_and_the_rest_are_stored(tmp_path):
    good = unit_rows(3, 8)
    names = ("g1", "not-b64", "short", "words", "object", "g2", "multi")
    inputs = {cid: f"text {cid}" for cid in names}
    lines = [
        embedding_line("g1", [good[0].tolist()]),
        embedding_line("not-b64", ["this is not base64!"]),
        embedding_line("short", [good[1][:5].tolist()]),  # 5 numbers among 8-d vectors
        embedding_line("words", [["a", "b"]]),
        embedding_line("object", [{"x": 1}]),
        embedding_line("g2", [b64(good[1])]),
        embedding_line("multi", [good[2].tolist(), "@@@@"]),  # input 1 is broken, 0 is fine
    ]
    job = embedding_job(tmp_path, inputs, lines, base64_ids=frozenset({"g2"}))
    store = Store(tmp_path / "studio.duckdb")
    assert store.ingest(job) == 7  # every line has its results row
    assert sorted(stored(store, job.job_id)) == [("g1", 0), ("g2", 0), ("multi", 0)]
    problems = V.vector_problems(store, job.job_id)
    reasons = {(r.custom_id, r.input_index): r.problem for r in problems.itertuples()}
    assert set(reasons) == {
        ("not-b64", 0), ("short", 0), ("words", 0), ("object", 0), ("multi", 1)
    }  # fmt: skip
    assert "not valid base64" in reasons[("not-b64", 0)]
    assert reasons[("short", 0)] == "the vector has 5 dimensions; the job's have 8"
    assert reasons[("words", 0)] == "the embedding holds something other than numbers"
    assert reasons[("object", 0)] == "the embedding is a dict, not numbers or base64"
    assert "not valid base64" in reasons[("multi", 1)]
    assert V.vector_summary(store, job.job_id).problems == 5
    assert set(store.query("SELECT status FROM results")["status"]) == {"succeeded"}
    # What could not be stored as a vector stays in its line: the export loses nothing.
    out = tmp_path / "out.jsonl"
    export_results(store, R.ResultFilter(job_ids=[job.job_id]), out, "jsonl")
    exported = [json.loads(text) for text in out.read_text().splitlines()]
    assert [line["response"]["body"]["data"] for line in exported] == [
        line["response"]["body"]["data"] for line in lines
    ]


def test_similar_to_ranks_as_numpy_does(tmp_path):
    store, job_id, matrix = random_job(tmp_path, 500, 32)
    ids = [f"r{i:04d}" for i in range(500)]
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    query = np.random.default_rng(9).standard_normal(32).astype(np.float32)
    cosine = unit @ (query / np.linalg.norm(query))
    best = np.argsort(-cosine)[:10]
    found = V.similar_to_vector(store, job_id, query * 7, k=10)  # scale never matters
    assert found["custom_id"].tolist() == [ids[i] for i in best]
    np.testing.assert_allclose(found["similarity"], cosine[best], atol=1e-5)
    assert found["text"].tolist() == [f"text number {i}" for i in best]
    # From a stored vector: itself left out, its nearest neighbours in order.
    own = unit @ unit[123]
    own[123] = -np.inf
    near = V.similar_to(store, job_id, "r0123", k=5)
    assert near["custom_id"].tolist() == [ids[i] for i in np.argsort(-own)[:5]]
    with pytest.raises(V.VectorError, match="the query has 3 numbers; the vectors have 32"):
        V.similar_to_vector(store, job_id, [1, 2, 3])


def test_near_duplicate_pairs_are_the_brute_force_ones(tmp_path):
    base = unit_rows(120, 24, seed=3)
    rng = np.random.default_rng(4)
    # Twelve planted near copies of other rows, at varying closeness.
    for i in range(12):
        base[60 + i] = base[i] + rng.normal(0, 0.02 * (1 + i % 4), 24)
    inputs = {f"r{i:04d}": f"t{i}" for i in range(120)}
    job = embedding_job(
        tmp_path, inputs, [embedding_line(cid, [base[i].tolist()]) for i, cid in enumerate(inputs)]
    )
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    unit = base / np.linalg.norm(base, axis=1, keepdims=True)
    sims = unit @ unit.T
    expected = {
        (f"r{i:04d}", f"r{j:04d}")
        for i in range(120)
        for j in range(i + 1, 120)
        if sims[i, j] >= 0.97
    }
    assert len(expected) >= 6  # the test plants enough pairs to mean something
    found = V.near_duplicates(store, job.job_id, threshold=0.97)
    assert set(zip(found.pairs["custom_id_a"], found.pairs["custom_id_b"], strict=True)) == expected
    assert (found.found, found.truncated) == (len(expected), False)
    assert found.pairs["similarity"].is_monotonic_decreasing
    assert found.pairs.iloc[0]["text_a"].startswith("t")
    top3 = V.near_duplicates(store, job.job_id, threshold=0.97, max_pairs=3)
    assert top3.truncated and top3.found == len(expected) and len(top3.pairs) == 3
    best = sorted(((sims[int(a[1:]), int(b[1:])], a, b) for a, b in expected), reverse=True)[:3]
    assert list(zip(top3.pairs["custom_id_a"], top3.pairs["custom_id_b"], strict=True)) == [
        (a, b) for _, a, b in best
    ]


def test_the_map_is_a_bounded_seeded_sample_on_two_axes(tmp_path):
    rng = np.random.default_rng(5)
    # Points on a tilted plane in 16-d: two axes carry all the variance.
    plane = np.linalg.qr(rng.standard_normal((16, 2)))[0]
    coords = rng.standard_normal((300, 2)) * [5.0, 1.0]
    matrix = (coords @ plane.T).astype(np.float32) + 3.0
    inputs = {f"r{i:04d}": f"point {i}" for i in range(300)}
    job = embedding_job(
        tmp_path,
        inputs,
        [embedding_line(cid, [matrix[i].tolist()]) for i, cid in enumerate(inputs)],
    )
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    sample = V.vector_map(store, job.job_id, max_points=100, seed=1)
    assert (sample.total, sample.sampled, len(sample.points)) == (300, 100, 100)
    assert list(sample.points.columns[:5]) == ["x", "y", "custom_id", "input_index", "text"]
    assert sample.points["custom_id"].is_unique
    assert sum(sample.explained) == pytest.approx(1.0, abs=1e-4)
    assert sample.explained[0] > sample.explained[1]
    assert np.isfinite(sample.points[["x", "y"]].to_numpy()).all()
    again = V.vector_map(store, job.job_id, max_points=100, seed=1)
    assert again.points.equals(sample.points)  # same seed, same map
    other = V.vector_map(store, job.job_id, max_points=100, seed=2)
    assert set(other.points["custom_id"]) != set(sample.points["custom_id"])
    # The distances within the sample survive the projection (the plane is flat).
    rows = [int(c[1:]) for c in sample.points["custom_id"]]
    original = np.linalg.norm(matrix[rows[0]] - matrix[rows[1]])
    mapped = np.hypot(*(sample.points[["x", "y"]].iloc[0] - sample.points[["x", "y"]].iloc[1]))
    assert mapped == pytest.approx(original, rel=1e-3)
    assert V.vector_map(store, job.job_id, max_points=1000).sampled == 300


def test_exports_round_trip_vectors_and_ids_in_input_order(tmp_path):
    store, job_id, matrix = random_job(tmp_path, 60, 20)
    ids = [f"r{i:04d}" for i in range(60)]
    rows = V.export_vectors_parquet(store, job_id, tmp_path / "out" / "vectors.parquet")
    table = pq.read_table(tmp_path / "out" / "vectors.parquet")
    assert rows == 60 and table.column("custom_id").to_pylist() == ids
    np.testing.assert_array_equal(np.array(table.column("vector").to_pylist(), np.float32), matrix)
    assert table.column("text").to_pylist()[5] == "text number 5"
    npy, ids_file = V.export_vectors_npy(store, job_id, tmp_path / "out" / "vectors.npy")
    loaded = np.load(npy)
    assert loaded.dtype == np.float32 and loaded.shape == (60, 20)
    np.testing.assert_array_equal(loaded, matrix)
    listed = ids_file.read_text().splitlines()
    assert listed[0] == '"row","custom_id","input_index","text"'
    assert [line.split(",")[1].strip('"') for line in listed[1:]] == ids


def test_a_deleted_job_folder_takes_its_vectors_along(tmp_path):
    import shutil

    store, job_id, _ = random_job(tmp_path, 10, 8)
    shutil.rmtree(tmp_path / "work" / "jobs" / job_id)
    store.ingest_all(tmp_path / "work" / "jobs")
    assert V.vector_summary(store, job_id).count == 0
    assert store.query("SELECT count(*) AS n FROM vectors_8")["n"][0] == 0
