"""The DuckDB index of jobs and results, opened only by the UI process.

DuckDB lets one process open a database file for writing, and then no other may read it,
so the worker never touches it: the store ingests job folders instead. Ingest is keyed by
``(job_id, custom_id)`` and remembers how far it read each ``output.jsonl``, so running it
twice changes nothing, and a deleted database is rebuilt from the job folders.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from core.jobs.folder import JobFolder, JobUnreadable, list_jobs
from core.jobs.output_file import complete_lines
from core.store.schema import (
    MIGRATIONS,
    REQUEST_COLUMNS_SQL,
    REQUEST_SHAPE,
    RESULT_COLUMNS_SQL,
    RESULT_SHAPE,
    SEARCH_TEXT_SQL,
)
from core.store.vector_ingest import forget_vectors, job_dims, store_vectors, take_vectors

BATCH_LINES = 50_000
JOB_COLUMNS = (
    "job_id", "created_at", "source", "model", "folder", "state", "total", "succeeded",
    "failed", "prompt_tokens", "completion_tokens", "error", "name",
)  # fmt: skip


MEMORY_LIMIT = "512MB"
# Floats are stored uncompressed: the only float columns are embedding vectors, and
# "similar to this" scans them all. DuckDB picks ALP-RD for vectors, which saves little on
# them and slows the scan: 100,000 384-d vectors on a busy 2-core machine took 250-520 ms
# against 75-185 ms in one measurement, 162 against 143 ms median (888 against 214 ms
# worst) in another (bench/vectors.py prints both).
FLOAT_CODECS_OFF = "alp,alprd,chimp,patas"


class Store:
    """One DuckDB file; safe to share between Streamlit's script threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # DuckDB's buffer pool grows to most of the machine's memory by default; the UI's
        # queries stream, so a fixed share keeps the UI process small (it spills past it).
        self._con = duckdb.connect(str(self.path), config={"memory_limit": MEMORY_LIMIT})
        # (as a config option at connect, DuckDB 1.5 ignores it)
        self._con.execute(f"SET disabled_compression_methods = '{FLOAT_CODECS_OFF}'")
        self.unreadable: dict[str, str] = {}  # job folders the last ingest_all could not read
        self._lock = threading.RLock()
        self._migrate()

    @contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor on the one connection, held under the store's lock (Streamlit runs each
        session's script in its own thread); for several statements in one transaction."""
        with self._lock:
            cursor = self._con.cursor()
            try:
                yield cursor
            finally:
                cursor.close()

    def _migrate(self) -> None:
        with self.cursor() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ DEFAULT now())"
            )
            applied = {
                row[0] for row in cur.execute("SELECT version FROM schema_migrations").fetchall()
            }
            for version, sql in enumerate(MIGRATIONS, start=1):
                if version in applied:
                    continue
                cur.execute("BEGIN")
                cur.execute(sql)
                cur.execute("INSERT INTO schema_migrations (version) VALUES (?)", [version])
                cur.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        with self.cursor() as cur:
            return cur.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]

    def close(self) -> None:
        self._con.close()

    def query(self, sql: str, params: list[Any] | None = None) -> pd.DataFrame:
        """Runs one read and returns its rows as a frame."""
        with self.cursor() as cur:
            return cur.execute(sql, params or []).df()

    def execute(self, sql: str, params: list[Any] | None = None) -> None:
        """Runs one write (or COPY)."""
        with self.cursor() as cur:
            cur.execute(sql, params or [])

    # -- ingest ---------------------------------------------------------------------------

    def ingest_all(self, jobs_dir: Path) -> int:
        """Ingests every job folder and forgets jobs whose folder is gone; returns the
        number of new result lines.

        A folder that cannot be read is that job's problem: it is skipped and its reason
        kept in :attr:`unreadable` (job id -> reason) for the pages to show.
        """
        folders = list_jobs(jobs_dir)
        self.forget_missing(jobs_dir, {job.job_id for job in folders})
        new_rows, unreadable = 0, {}
        for job in folders:
            try:
                new_rows += self.ingest(job)
            except JobUnreadable as exc:
                unreadable[job.job_id] = exc.reason
        self.unreadable = unreadable
        return new_rows

    def forget_missing(self, jobs_dir: Path, present: set[str]) -> None:
        """Drops the rows of jobs whose folder under ``jobs_dir`` is gone (the folder is the
        truth). Review labels and samples stay: they are people's work, kept for export."""
        with self.cursor() as cur:
            gone = [
                job_id
                for job_id, folder in cur.execute("SELECT job_id, folder FROM jobs").fetchall()
                if job_id not in present and Path(folder).parent == jobs_dir
            ]
            tables = ("results", "requests", "ingest_state", "job_events", "jobs")
            for table in (*tables, "rule_outcomes", "rule_runs"):  # outcomes: from rules.yaml
                if gone:
                    cur.execute(f"DELETE FROM {table} WHERE list_contains(?, job_id)", [gone])
            if gone:  # a judge's verdicts go with its folder
                cur.execute("DELETE FROM judge_links WHERE list_contains(?, judge_job)", [gone])
            forget_vectors(cur, gone)

    def ingest(self, job: JobFolder) -> int:
        """Brings one job folder's state and new result lines into the store."""
        spec = job.read_spec()  # raises JobUnreadable, before anything is written
        status = job.read_status()
        name = job.name  # a rename's name.txt, else job.json's (also raises JobUnreadable)
        job_id = job.job_id  # the folder's name, never an id written inside it
        with self.cursor() as cur:
            cur.execute(
                f"INSERT OR REPLACE INTO jobs ({', '.join(JOB_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(JOB_COLUMNS))})",
                [
                    job_id,
                    spec.created_at,
                    spec.source,
                    ", ".join(spec.model_names()),  # an embeddings job's is its embedder
                    str(job.path),
                    status.display_state,
                    status.total,
                    status.succeeded,
                    status.failed,
                    status.prompt_tokens,
                    status.completion_tokens,
                    status.error,
                    name,
                ],
            )
            if spec.judge is not None:
                link = spec.judge
                cur.execute(
                    "INSERT OR REPLACE INTO judge_links VALUES (?, ?, ?, ?)",
                    [job_id, link.kind, list(link.graded), link.check],
                )
            for event in status.history:
                cur.execute(
                    "INSERT OR IGNORE INTO job_events VALUES (?, ?, ?)",
                    [job_id, event["state"], event["at"]],
                )
            row = cur.execute(
                "SELECT requests_loaded, output_offset, errors_offset FROM ingest_state "
                "WHERE job_id = ?",
                [job_id],
            ).fetchone()
            loaded, output_offset, errors_offset = row if row else (False, 0, 0)
            if not loaded:
                self._load_requests(cur, job)
            # Failures first: a success read in the same pass must win over them.
            failed_rows, errors_offset = self._load_results(cur, job, job.errors, errors_offset)
            new_rows, output_offset = self._load_results(cur, job, job.output, output_offset)
            cur.execute(
                "INSERT OR REPLACE INTO ingest_state VALUES (?, true, ?, ?)",
                [job_id, output_offset, errors_offset or 0],
            )
        return new_rows + failed_rows

    def _load_requests(self, cur: duckdb.DuckDBPyConnection, job: JobFolder) -> None:
        """Loads the job's request lines (within a batch, the first line of a repeated id wins;
        jobs refuse repeated ids anyway)."""
        line_nos: list[int] = []
        raws: list[str] = []
        with job.input.open("rb") as handle:
            for line_no, raw in enumerate(handle, start=1):
                if line_no == 1:
                    raw = raw.removeprefix(b"\xef\xbb\xbf")
                if raw.strip():
                    line_nos.append(line_no)
                    raws.append(raw.decode("utf-8", "replace"))
        for start in range(0, len(raws), BATCH_LINES):
            lines = pa.table(  # noqa: F841 (read by DuckDB by name)
                {
                    "line_no": line_nos[start : start + BATCH_LINES],
                    "raw": raws[start : start + BATCH_LINES],
                }
            )
            cur.execute(
                f"""
                INSERT OR REPLACE INTO requests BY NAME
                WITH parsed AS (
                    SELECT line_no, raw,
                           CASE WHEN json_valid(raw) THEN json_transform(raw, ?) END AS d
                    FROM lines
                ), users AS (
                    SELECT *, list_filter(json_extract(coalesce(d.body.messages, d.body.input),
                                                       '$[*]'),
                                          lambda m: m->>'role' = 'user')[-1]->'$.content'
                              AS user_content
                    FROM parsed
                )
                SELECT *, lower(prompt) AS prompt_lower
                FROM (SELECT ? AS job_id, {REQUEST_COLUMNS_SQL} FROM users)
                QUALIFY row_number() OVER (PARTITION BY custom_id ORDER BY line_no) = 1
                """,
                [REQUEST_SHAPE, job.job_id],
            )

    def _load_results(
        self, cur: duckdb.DuckDBPyConnection, job: JobFolder, path: Path, offset: int
    ) -> tuple[int, int]:
        """Upserts the complete lines of a result file past ``offset``; a success is never
        replaced by a failure (a retried request's old error stays in errors.jsonl)."""
        if not path.exists():
            return 0, 0
        offset = offset or 0
        if path.stat().st_size < offset:  # repaired or restarted: read it again (idempotent)
            offset = 0
        total = 0
        while True:  # a bounded piece of the file at a time
            found, after = complete_lines(path, offset)
            if after == offset:
                return total, offset
            total += self._upsert_results(cur, job, [r.decode("utf-8", "replace") for r in found])
            offset = after

    def _upsert_results(
        self, cur: duckdb.DuckDBPyConnection, job: JobFolder, raws: list[str]
    ) -> int:
        # Embedding lines: their vectors go to the vector tables, their results row keeps
        # the line without them (nothing changes for other endpoints' lines).
        raws, vectors = take_vectors(raws, job_dims(cur, job.job_id))
        if vectors.vectors or vectors.problems:
            store_vectors(cur, job.job_id, vectors)
        for start in range(0, len(raws), BATCH_LINES):
            lines = pa.table(  # noqa: F841 (read by DuckDB by name)
                {"position": range(start, min(start + BATCH_LINES, len(raws))),
                 "raw": raws[start : start + BATCH_LINES]}
            )  # fmt: skip
            columns = [
                "status", "status_code", "answer", "finish_reason", "prompt_tokens",
                "completion_tokens", "error_code", "error_message", "raw", "model", "created_at",
                "line_no", "prompt", "prompt_version", "metadata", "latency_ms", "search_text",
            ]  # fmt: skip
            updates = ", ".join(f"{c} = excluded.{c}" for c in columns)
            # Request fields ride along (failures get the job's model) so reads need no join;
            # within one batch the last line of an id wins, as it would line by line.
            cur.execute(
                f"""
                INSERT INTO results BY NAME
                WITH parsed AS (
                    SELECT position, raw, json_transform(raw, ?) AS d,
                           (SELECT dims FROM vector_jobs WHERE job_id = ?) AS vector_dims
                    FROM lines
                ), rows AS (
                    SELECT position, {RESULT_COLUMNS_SQL}
                    FROM (SELECT *, d.response.body AS b FROM parsed)
                    QUALIFY row_number() OVER (PARTITION BY custom_id ORDER BY position DESC) = 1
                )
                SELECT ? AS job_id, f.* EXCLUDE (position, model),
                       coalesce(f.model, j.model) AS model,
                       q.line_no, q.prompt, q.prompt_version, q.metadata,
                       {SEARCH_TEXT_SQL.format(prompt_lower="q.prompt_lower", answer="f.answer")}
                           AS search_text
                FROM rows f
                LEFT JOIN requests q ON q.job_id = ? AND q.custom_id = f.custom_id
                LEFT JOIN jobs j ON j.job_id = ?
                ON CONFLICT (job_id, custom_id) DO UPDATE SET {updates}
                WHERE results.status <> 'succeeded' OR excluded.status = 'succeeded'
                """,
                [RESULT_SHAPE, job.job_id, job.job_id, job.job_id, job.job_id],
            )
        return len(raws)

    # -- queries --------------------------------------------------------------------------

    def jobs(self) -> pd.DataFrame:
        with self.cursor() as cur:
            return cur.execute("SELECT * FROM jobs ORDER BY created_at DESC").df()

    def data_version(self, job_ids: list[str] | None = None, live_seconds: float = 10.0) -> tuple:
        """A key that changes when the index does for these jobs (all when None): lines
        ingested, their states and names, and review labels; a few milliseconds to read.

        While one of them is still running its results change all the time: the key then
        moves on at most every ``live_seconds``, so a page redrawn on each click shows
        live figures without recomputing them on every click.
        """
        scope, params = "", []
        if job_ids:
            scope = f"WHERE job_id IN ({', '.join('?' * len(job_ids))})"
            params = list(job_ids)
        with self.cursor() as cur:
            jobs = cur.execute(
                f"SELECT count(*), max(name), string_agg(state, ',' ORDER BY job_id), "
                f"bool_or(state NOT IN ('completed', 'failed', 'cancelled', 'expired')) "
                f"FROM jobs {scope}",
                params,
            ).fetchone()
            labels = cur.execute(
                f"SELECT count(*), max(updated_at) FROM reviews {scope}", params
            ).fetchone()
            labels += cur.execute(  # checks graded again
                f"SELECT count(*), max(graded_at) FROM rule_runs {scope}", params
            ).fetchone()
            if jobs[3]:  # running: a time bucket instead of the offsets
                return (*jobs[:3], *labels, int(time.time() // live_seconds))
            lines = cur.execute(
                f"SELECT coalesce(sum(output_offset), 0) + coalesce(sum(errors_offset), 0) "
                f"FROM ingest_state {scope}",
                params,
            ).fetchone()
        return (*jobs[:3], *labels, *lines)

    def job_names(self) -> dict[str, str]:
        """Each indexed job's name ("" for a job without one), by job id."""
        with self.cursor() as cur:
            rows = cur.execute("SELECT job_id, coalesce(name, '') FROM jobs").fetchall()
        return dict(rows)

    def results(self, job_id: str, limit: int = 1000, offset: int = 0) -> pd.DataFrame:
        """A page of a job's results in input order, with each request's prompt."""
        with self.cursor() as cur:
            return cur.execute(
                """
                SELECT r.custom_id, r.status, q.prompt, r.answer, r.finish_reason,
                       r.prompt_tokens, r.completion_tokens, r.error_message
                FROM results r
                LEFT JOIN requests q USING (job_id, custom_id)
                WHERE r.job_id = ?
                ORDER BY q.line_no NULLS LAST, r.custom_id
                LIMIT ? OFFSET ?
                """,
                [job_id, limit, offset],
            ).df()

    def count_results(self, job_id: str) -> int:
        with self.cursor() as cur:
            return cur.execute(
                "SELECT count(*) FROM results WHERE job_id = ?", [job_id]
            ).fetchone()[0]
