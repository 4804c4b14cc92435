"""The DuckDB index of jobs and results, opened only by the UI process.

DuckDB lets one process open a database file for writing, and then no other may read it,
so the worker never touches it: the store ingests job folders instead. Ingest is keyed by
``(job_id, custom_id)`` and remembers how far it read each ``output.jsonl``, so running it
twice changes nothing, and a deleted database is rebuilt from the job folders.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from core.jobs.folder import JobFolder, list_jobs

# A result's searchable text: its prompt and answer, lowercased, on two lines. The prompt
# is lowered once, when the job's requests are loaded (requests.prompt_lower), so that
# results stream in at full speed.
SEARCH_TEXT_SQL = "concat_ws(chr(10), {prompt_lower}, lower({answer}))"

# Numbered migrations, applied in order at start-up; never edit one that has shipped.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE jobs (
        job_id VARCHAR PRIMARY KEY,
        created_at TIMESTAMPTZ,
        source VARCHAR,
        model VARCHAR,
        folder VARCHAR,
        state VARCHAR,
        total INTEGER,
        succeeded INTEGER,
        failed INTEGER,
        prompt_tokens BIGINT,
        completion_tokens BIGINT,
        error VARCHAR
    );
    CREATE TABLE requests (
        job_id VARCHAR,
        custom_id VARCHAR,
        line_no INTEGER,
        model VARCHAR,
        prompt VARCHAR,
        messages JSON,
        PRIMARY KEY (job_id, custom_id)
    );
    CREATE TABLE results (
        job_id VARCHAR,
        custom_id VARCHAR,
        status VARCHAR,
        status_code INTEGER,
        answer VARCHAR,
        finish_reason VARCHAR,
        prompt_tokens INTEGER,
        completion_tokens INTEGER,
        error_code VARCHAR,
        error_message VARCHAR,
        raw JSON,
        PRIMARY KEY (job_id, custom_id)
    );
    CREATE TABLE ingest_state (
        job_id VARCHAR PRIMARY KEY,
        requests_loaded BOOLEAN,
        output_offset BIGINT
    );
    """,
    # Results that analysts judge: request metadata, answer times, samples and labels.
    # Re-ingesting fills the new columns for jobs ingested before (ingest is idempotent).
    """
    ALTER TABLE requests ADD COLUMN metadata JSON;
    ALTER TABLE requests ADD COLUMN prompt_version VARCHAR;
    ALTER TABLE requests ADD COLUMN params JSON;
    ALTER TABLE results ADD COLUMN model VARCHAR;
    ALTER TABLE results ADD COLUMN created_at TIMESTAMPTZ;
    -- copied from the request at ingest so that browsing a million rows needs no join
    ALTER TABLE results ADD COLUMN line_no INTEGER;
    ALTER TABLE results ADD COLUMN prompt VARCHAR;
    ALTER TABLE results ADD COLUMN prompt_version VARCHAR;
    ALTER TABLE results ADD COLUMN metadata JSON;
    UPDATE ingest_state SET requests_loaded = false, output_offset = 0;
    CREATE TABLE samples (
        sample_id VARCHAR PRIMARY KEY,
        name VARCHAR,
        created_at TIMESTAMPTZ DEFAULT now(),
        definition JSON,
        size INTEGER
    );
    CREATE TABLE sample_items (
        sample_id VARCHAR,
        position INTEGER,
        job_id VARCHAR,
        custom_id VARCHAR,
        stratum VARCHAR,
        PRIMARY KEY (sample_id, position)
    );
    CREATE TABLE reviews (
        job_id VARCHAR,
        custom_id VARCHAR,
        reviewer VARCHAR,
        verdict VARCHAR,
        score INTEGER,
        tags VARCHAR[],
        comment VARCHAR,
        corrected_answer VARCHAR,
        sample_id VARCHAR,
        updated_at TIMESTAMPTZ DEFAULT now(),
        PRIMARY KEY (job_id, custom_id, reviewer)
    );
    CREATE TABLE preferences (
        comparison VARCHAR,
        key VARCHAR,
        reviewer VARCHAR,
        job_a VARCHAR,
        custom_id_a VARCHAR,
        job_b VARCHAR,
        custom_id_b VARCHAR,
        choice VARCHAR,
        updated_at TIMESTAMPTZ DEFAULT now(),
        PRIMARY KEY (comparison, key, reviewer)
    );
    """,
    # The job ledger: failures live in errors.jsonl (read from their own offset), and each
    # state a job passes through is kept with its time.
    """
    ALTER TABLE ingest_state ADD COLUMN errors_offset BIGINT DEFAULT 0;
    CREATE TABLE job_events (
        job_id VARCHAR,
        state VARCHAR,
        entered_at TIMESTAMPTZ,
        PRIMARY KEY (job_id, state, entered_at)
    );
    """,
    # Per-request latency (``latency_ms`` of a result line: entering the engine to the final
    # output). Lines written before the engine recorded it keep NULL; nothing to re-read.
    """
    ALTER TABLE results ADD COLUMN latency_ms INTEGER;
    """,
    # Search: prompt and answer lowercased in one column, read by every search first (see
    # core.store.results.where): lowering a million texts at each search cost most of its time.
    """
    ALTER TABLE requests ADD COLUMN prompt_lower VARCHAR;
    UPDATE requests SET prompt_lower = lower(prompt);
    ALTER TABLE results ADD COLUMN search_text VARCHAR;
    UPDATE results SET search_text = concat_ws(chr(10), lower(prompt), lower(answer));
    """,
]


# Requests and results are parsed by DuckDB's JSON functions, not line by line in Python:
# ingest must keep up with the engine (20,000+ lines/s).
# Each line is parsed once into a struct (json_transform); fields are read from it.
RESULT_SHAPE = json.dumps(
    {
        "custom_id": "VARCHAR",
        "error": "JSON",
        "latency_ms": "INTEGER",
        "response": {
            "status_code": "INTEGER",
            "body": {
                "object": "VARCHAR",
                "model": "VARCHAR",
                "created": "DOUBLE",
                "created_at": "DOUBLE",
                "status": "VARCHAR",
                "choices": [
                    {
                        "text": "VARCHAR",
                        "finish_reason": "VARCHAR",
                        "message": {"content": "VARCHAR"},
                    }
                ],
                "output": [{"content": [{"text": "VARCHAR"}]}],
                "usage": {
                    "prompt_tokens": "INTEGER",
                    "completion_tokens": "INTEGER",
                    "input_tokens": "INTEGER",
                    "output_tokens": "INTEGER",
                },
            },
        },
    }
)
RESULT_COLUMNS_SQL = """
    d.custom_id AS custom_id,
    CASE WHEN coalesce(json_type(d.error), 'NULL') = 'NULL'
         THEN 'succeeded' ELSE 'failed' END AS status,
    d.response.status_code AS status_code,
    coalesce(b.choices[1].message.content, b.choices[1].text,
             b.output[1].content[1].text) AS answer,
    CASE WHEN b.object = 'response'
         THEN CASE WHEN b.status = 'incomplete' THEN 'length' ELSE 'stop' END
         ELSE b.choices[1].finish_reason END AS finish_reason,
    coalesce(b.usage.prompt_tokens, b.usage.input_tokens) AS prompt_tokens,
    coalesce(b.usage.completion_tokens, b.usage.output_tokens) AS completion_tokens,
    d.error->>'$.code' AS error_code,
    CASE WHEN json_type(d.error) = 'VARCHAR' THEN d.error->>'$'
         ELSE d.error->>'$.message' END AS error_message,
    raw::JSON AS raw,
    b.model AS model,
    to_timestamp(coalesce(b.created, b.created_at)) AS created_at,
    d.latency_ms AS latency_ms
"""
REQUEST_SHAPE = json.dumps(
    {
        "custom_id": "VARCHAR",
        "body": {
            "model": "VARCHAR",
            "prompt": "VARCHAR",
            "input": "JSON",
            "messages": "JSON",
            "metadata": "JSON",
        },
    }
)
# The text a person reads as "the prompt": the last user turn (text parts joined), a
# completions prompt, or a Responses input.
REQUEST_COLUMNS_SQL = """
    coalesce(d.custom_id, 'line-' || line_no) AS custom_id,
    line_no,
    d.body.model AS model,
    coalesce(
        CASE json_type(user_content)
            WHEN 'ARRAY' THEN array_to_string(
                list_transform(json_extract(user_content, '$[*]'), lambda p: p->>'text'), '')
            ELSE user_content->>'$' END,
        d.body.prompt,
        CASE json_type(d.body.input) WHEN 'VARCHAR' THEN d.body.input->>'$' END
    ) AS prompt,
    coalesce(d.body.messages, d.body.input) AS messages,
    d.body.metadata AS metadata,
    d.body.metadata->>'$.prompt_version' AS prompt_version,
    CASE WHEN d IS NOT NULL THEN
        json_merge_patch(raw->'$.body', '{"messages": null, "metadata": null}') END AS params
"""
BATCH_LINES = 50_000


def _complete_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """The complete lines after ``offset`` and the offset after them."""
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read()
    complete = data[: data.rfind(b"\n") + 1]
    lines = [raw.decode("utf-8", "replace") for raw in complete.splitlines() if raw.strip()]
    return lines, offset + len(complete)


class Store:
    """One DuckDB file; safe to share between Streamlit's script threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._con = duckdb.connect(str(self.path))
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
        """Ingests every job folder; returns the number of new result lines."""
        return sum(self.ingest(job) for job in list_jobs(jobs_dir))

    def ingest(self, job: JobFolder) -> int:
        """Brings one job folder's state and new result lines into the store."""
        spec = job.read_spec()
        status = job.read_status()
        with self.cursor() as cur:
            cur.execute(
                "INSERT OR REPLACE INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    spec.job_id,
                    spec.created_at,
                    spec.source,
                    spec.engine.model_name,
                    str(job.path),
                    status.display_state,
                    status.total,
                    status.succeeded,
                    status.failed,
                    status.prompt_tokens,
                    status.completion_tokens,
                    status.error,
                ],
            )
            for event in status.history:
                cur.execute(
                    "INSERT OR IGNORE INTO job_events VALUES (?, ?, ?)",
                    [spec.job_id, event["state"], event["at"]],
                )
            row = cur.execute(
                "SELECT requests_loaded, output_offset, errors_offset FROM ingest_state "
                "WHERE job_id = ?",
                [spec.job_id],
            ).fetchone()
            loaded, output_offset, errors_offset = row if row else (False, 0, 0)
            if not loaded:
                self._load_requests(cur, job)
            # Failures first: a success read in the same pass must win over them.
            failed_rows, errors_offset = self._load_results(cur, job, job.errors, errors_offset)
            new_rows, output_offset = self._load_results(cur, job, job.output, output_offset)
            cur.execute(
                "INSERT OR REPLACE INTO ingest_state VALUES (?, true, ?, ?)",
                [spec.job_id, output_offset, errors_offset or 0],
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
                    SELECT *, list_filter(json_extract(d.body.messages, '$[*]'),
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
        raws, offset = _complete_lines(path, offset)
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
                    SELECT position, raw, json_transform(raw, ?) AS d FROM lines
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
                [RESULT_SHAPE, job.job_id, job.job_id, job.job_id],
            )
        return len(raws), offset

    # -- queries --------------------------------------------------------------------------

    def jobs(self) -> pd.DataFrame:
        with self.cursor() as cur:
            return cur.execute("SELECT * FROM jobs ORDER BY created_at DESC").df()

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
