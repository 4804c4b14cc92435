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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from core.checks import scan
from core.jobs import JobFolder, list_jobs
from core.outputs import answer_text, token_usage

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
]


def _result_row(job_id: str, line: dict[str, Any]) -> dict[str, Any]:
    response = line.get("response") or {}
    body = response.get("body") or {}
    choice = (body.get("choices") or [{}])[0]
    usage = token_usage(line) or (None, None)
    finish_reason = choice.get("finish_reason")
    if body.get("object") == "response":  # the Responses API says it with its status
        finish_reason = "length" if body.get("status") == "incomplete" else "stop"
    error = line.get("error") or {}
    if not isinstance(error, dict):
        error = {"message": str(error)}
    return {
        "job_id": job_id,
        "custom_id": line["custom_id"],
        "status": "succeeded" if not line.get("error") else "failed",
        "status_code": response.get("status_code"),
        "answer": answer_text(line),
        "finish_reason": finish_reason,
        "prompt_tokens": usage[0],
        "completion_tokens": usage[1],
        "error_code": error.get("code"),
        "error_message": error.get("message"),
        "raw": json.dumps(line, ensure_ascii=False),
        "model": body.get("model"),
        "created_at": _timestamp(body.get("created", body.get("created_at"))),
    }


def _timestamp(created: Any) -> datetime | None:
    """The answer's ``created`` (Unix seconds) as a UTC time; None for failures."""
    if isinstance(created, int | float) and not isinstance(created, bool):
        return datetime.fromtimestamp(created, UTC)
    return None


def _bodies(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yields ``(line_no, body)`` for lines whose body is an object, numbered like ``scan``."""
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                body = json.loads(raw.removeprefix(b"\xef\xbb\xbf")).get("body")
            except (ValueError, AttributeError):
                continue
            if isinstance(body, dict):
                yield line_no, body


def _request_extras(body: dict[str, Any] | None) -> dict[str, Any]:
    """Metadata, prompt version and the parameters a body asked for (messages left out)."""
    body = body or {}
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else None
    version = (metadata or {}).get("prompt_version")
    params = {k: v for k, v in body.items() if k not in ("messages", "metadata")}
    return {
        "metadata": json.dumps(metadata, ensure_ascii=False) if metadata else None,
        "prompt_version": None if version is None else str(version),
        "params": json.dumps(params, ensure_ascii=False, default=str),
    }


class Store:
    """One DuckDB file; safe to share between Streamlit's script threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._con = duckdb.connect(str(self.path))
        self._lock = threading.RLock()
        self._migrate()

    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._lock:
            cursor = self._con.cursor()
            try:
                yield cursor
            finally:
                cursor.close()

    def _migrate(self) -> None:
        with self._cursor() as cur:
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
        with self._cursor() as cur:
            return cur.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]

    def close(self) -> None:
        self._con.close()

    # -- ingest ---------------------------------------------------------------------------

    def ingest_all(self, jobs_dir: Path) -> int:
        """Ingests every job folder; returns the number of new result lines."""
        return sum(self.ingest(job) for job in list_jobs(jobs_dir))

    def ingest(self, job: JobFolder) -> int:
        """Brings one job folder's state and new result lines into the store."""
        spec = job.read_spec()
        status = job.read_status()
        with self._cursor() as cur:
            cur.execute(
                "INSERT OR REPLACE INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    spec.job_id,
                    spec.created_at,
                    spec.source,
                    spec.engine_config.model_name,
                    str(job.path),
                    "interrupted" if status.interrupted else status.state,
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
        rows = []
        seen = set()
        bodies = _bodies(job.input)
        body_line, body = 0, None
        for checked in scan(job.input):
            cid = checked.custom_id or f"line-{checked.line_no}"
            if cid in seen:
                continue
            seen.add(cid)
            while body_line < checked.line_no:  # both walk the file in order
                body_line, body = next(bodies, (checked.line_no + 1, None))
            messages = checked.request.messages if checked.request else []
            users = [m["content"] for m in messages if m["role"] == "user"]
            rows.append(
                {
                    "job_id": job.job_id,
                    "custom_id": cid,
                    "line_no": checked.line_no,
                    "model": checked.request.model if checked.request else None,
                    "prompt": users[-1] if users else None,
                    "messages": json.dumps(messages, ensure_ascii=False),
                    **_request_extras(body if body_line == checked.line_no else None),
                }
            )
        if rows:
            frame = pd.DataFrame(rows)  # noqa: F841 (read by DuckDB by name)
            cur.execute("INSERT OR REPLACE INTO requests BY NAME SELECT * FROM frame")

    def _load_results(
        self, cur: duckdb.DuckDBPyConnection, job: JobFolder, path: Path, offset: int
    ) -> tuple[int, int]:
        """Upserts the complete lines of a result file past ``offset``; a success is never
        replaced by a failure (a retried request's old error stays in errors.jsonl)."""
        if not path.exists():
            return 0, 0
        size = path.stat().st_size
        offset = offset or 0
        if size < offset:  # the file was repaired or restarted: read it again (idempotent)
            offset = 0
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(size - offset)
        complete = data[: data.rfind(b"\n") + 1]
        rows = [_result_row(job.job_id, json.loads(raw)) for raw in complete.splitlines() if raw]
        if rows:
            frame = pd.DataFrame(rows)
            copied = ["line_no", "prompt", "prompt_version", "metadata"]
            updates = ", ".join(
                f"{c} = excluded.{c}"
                for c in [*frame.columns, *copied]
                if c not in ("job_id", "custom_id")
            )
            # Request fields ride along (failures get the job's model) so reads need no join.
            cur.execute(
                "INSERT INTO results BY NAME "
                "SELECT f.* EXCLUDE (model), coalesce(f.model, j.model) AS model, "
                "q.line_no, q.prompt, q.prompt_version, q.metadata FROM frame f "
                "LEFT JOIN requests q ON q.job_id = f.job_id AND q.custom_id = f.custom_id "
                "LEFT JOIN jobs j ON j.job_id = f.job_id "
                f"ON CONFLICT (job_id, custom_id) DO UPDATE SET {updates} "
                "WHERE results.status <> 'succeeded' OR excluded.status = 'succeeded'"
            )
        return len(rows), offset + len(complete)

    # -- queries --------------------------------------------------------------------------

    def jobs(self) -> pd.DataFrame:
        with self._cursor() as cur:
            return cur.execute("SELECT * FROM jobs ORDER BY created_at DESC").df()

    def results(self, job_id: str, limit: int = 1000, offset: int = 0) -> pd.DataFrame:
        """A page of a job's results in input order, with each request's prompt."""
        with self._cursor() as cur:
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
        with self._cursor() as cur:
            return cur.execute(
                "SELECT count(*) FROM results WHERE job_id = ?", [job_id]
            ).fetchone()[0]
