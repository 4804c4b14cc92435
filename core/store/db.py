"""The DuckDB index of jobs and results, opened by the UI process.

DuckDB lets one process open a database file, and then no other may read it, so the worker
never touches it: the store ingests job folders instead, and the command line, while the
app holds the file, reads a private copy (``core.store.snapshot``). Ingest is keyed by
``(job_id, custom_id)`` and remembers how far it read each ``output.jsonl``, so running it
twice changes nothing; a deleted or unreadable database is rebuilt from the job folders and
the human-work files (``core.store.human_index``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal, get_args

import duckdb
import pandas as pd
import pyarrow as pa

from core.jobs.folder import JobFolder, JobUnreadable, list_jobs
from core.jobs.output_file import CorruptLine, complete_lines
from core.run.progress import job_seconds
from core.store import human_index
from core.store.indexer import BackgroundSync
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
# The model a failed line (which names none) counts under: each mapped body.model -> the
# name its answers carry (a LoRA adapter's own), then the model of the names mapped
# nowhere (None: the job's models, a job of text and vectors).
FailureNames = tuple[dict[str, str], str | None]
JOB_COLUMNS = (
    "job_id", "created_at", "source", "model", "folder", "state", "total", "succeeded",
    "failed", "prompt_tokens", "completion_tokens", "error", "name", "engine_seconds",
)  # fmt: skip

# The groups of tables whose writers are taken one at a time (see Store.writing): the index
# of job folders (ingest), the checks' outcomes (grading), and what people make.
WriteScope = Literal["index", "checks", "edits"]
WRITE_SCOPES: tuple[WriteScope, ...] = get_args(WriteScope)

MEMORY_LIMIT = "512MB"
# Floats are stored uncompressed: the only float columns are embedding vectors, and
# "similar to this" scans them all. DuckDB picks ALP-RD for vectors, which saves little on
# them and slows the scan: 100,000 384-d vectors on a busy 2-core machine took 250-520 ms
# against 75-185 ms in one measurement, 162 against 143 ms median (888 against 214 ms
# worst) in another (bench/vectors.py prints both).
FLOAT_CODECS_OFF = "alp,alprd,chimp,patas"


class StoreLocked(RuntimeError):
    """Another process holds the database file (DuckDB lets one process open it)."""


SIGNED = ("job.json", "status.json", "name.txt", "output.jsonl", "errors.jsonl")


def _files_signature(job: JobFolder) -> tuple:
    """The size and modification time of each file of a job folder that ingest reads."""
    signature, folder = [], str(job.path)  # os.stat on strings: a page's rerun stats
    for name in SIGNED:  # every job's files (pathlib's joins cost as much as the stat)
        try:
            stat = os.stat(os.path.join(folder, name))
        except OSError:
            signature.append(None)
        else:
            signature.append((stat.st_size, stat.st_mtime_ns))
    return tuple(signature)


def _locked(exc: duckdb.Error) -> bool:
    return "Could not set lock" in str(exc)


def _set_aside(path: Path) -> Path:
    """Renames a database file that cannot be read (and its write-ahead log) out of the
    way, never deleting it; returns its new name."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.broken-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.broken-{stamp}-{n}")
    path.rename(aside)
    wal = path.with_name(path.name + ".wal")
    if wal.exists():
        wal.rename(aside.with_name(aside.name + ".wal"))
    return aside


class Store:
    """One DuckDB file, shared by Streamlit's script threads: reads run side by side, each
    on its own cursor; writes that replace or delete rows are taken one at a time.

    A file that DuckDB cannot read (truncated, overwritten, a foreign file) is set aside
    (renamed, see :attr:`set_aside`) and a new index is made: everything in it comes back
    from the job folders and the human-work files in ``human_dir`` (default: ``human/``
    beside the database). Raises :class:`StoreLocked` when another process holds the file.
    """

    def __init__(self, path: str | Path, human_dir: str | Path | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.human_dir = Path(human_dir) if human_dir else self.path.parent / "human"
        self.unreadable: dict[str, str] = {}  # job folders the last ingest_all could not read
        self.set_aside: Path | None = None  # where an unreadable database file was moved
        self.set_aside_reason = ""
        self.temporary: Path | None = None  # a private copy's folder, removed on close
        self.closed = False  # background work (a watcher's due ingest) checks before it runs
        self._writes = {scope: threading.RLock() for scope in WRITE_SCOPES}
        # Each job's files (size, mtime) at its last ingest: ingest_all reads changed ones only
        self._ingested: dict[str, tuple] = {}
        # How far the last sync read each human-work file (human_files, kept here; None: read
        # the index, after a failed sync or a hand-made write): a sync finding nothing new
        # runs no query. Saves ask human_sync: one pass for the saves of a quarter second.
        self._human_read: human_index.Offsets | None = None
        self.human_sync = BackgroundSync(self.sync_human, name="index-labels")
        try:
            self._open()
        except duckdb.Error as exc:
            if _locked(exc):
                pid = re.search(r"PID (\d+)", str(exc))
                holder = f" (process {pid.group(1)})" if pid else ""
                raise StoreLocked(
                    f"{self.path} is open in another Batch Studio process{holder}; DuckDB "
                    "lets one process open it"
                ) from exc
            self._close_quietly()
            # the first line: an internal error's next ones are DuckDB's stack trace
            self.set_aside_reason = str(exc).strip().splitlines()[0]
            self.set_aside = _set_aside(self.path)
            self._open()
        self.sync_human()

    def _open(self) -> None:
        # DuckDB's buffer pool grows to most of the machine's memory by default; the UI's
        # queries stream, so a fixed share keeps the UI process small (it spills past it).
        self._con = duckdb.connect(str(self.path), config={"memory_limit": MEMORY_LIMIT})
        # (as a config option at connect, DuckDB 1.5 ignores it)
        self._con.execute(f"SET disabled_compression_methods = '{FLOAT_CODECS_OFF}'")
        self._migrate()
        with self.cursor() as cur:  # reads the catalog and each table's first blocks
            for table in ("jobs", "results", "reviews", "samples", "preferences"):
                cur.execute(f"SELECT * FROM {table} LIMIT 1").fetchall()

    def _close_quietly(self) -> None:
        con = getattr(self, "_con", None)
        if con is not None:
            with suppress(duckdb.Error):
                con.close()

    def sync_human(self) -> None:
        """Indexes what was appended to the human-work files since the last sync (by this
        process or another); the whole files when the index is new."""
        with self.writing("edits") as cur:  # one sync at a time: each reads on from the last
            read, self._human_read = self._human_read, None  # kept only if the sync ends well
            self._human_read = human_index.sync(cur, self.human_dir, read)

    def human_problems(self) -> list[str]:
        """The lines of the human-work files that were skipped, named by file and line."""
        with self.cursor() as cur:
            return human_index.problems(cur)

    @contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of its own: a connection to the same database whose queries run beside
        every other cursor's (Streamlit runs each session's script in its own thread). For
        reads, and for a transaction that only adds rows under new keys (appends never
        conflict); one that replaces or deletes rows takes :meth:`writing`."""
        cursor = self._con.cursor()
        try:
            yield cursor
        finally:
            cursor.close()

    @contextmanager
    def writing(self, *scopes: WriteScope) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor for writes that replace or delete rows, one writer of each scope (group
        of tables, default ``index``) at a time: DuckDB does not make a second transaction
        on the same rows wait, it aborts it ("Conflict on update"). Writers of other scopes
        and every read run beside it."""
        with contextlib.ExitStack() as held:
            for scope in WRITE_SCOPES:  # always in this order: no two writers deadlock
                if scope in (scopes or ("index",)):
                    held.enter_context(self._writes[scope])
            yield held.enter_context(self.cursor())

    def _migrate(self) -> None:
        with self.writing() as cur:
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
            if len(applied) < len(MIGRATIONS):
                # On disk at once, not only in DuckDB's log: DuckDB 1.5 cannot replay some
                # schema changes from it (a column added with a list's default), so a process
                # killed before its first checkpoint left an index nothing could open.
                cur.execute("CHECKPOINT")

    @property
    def schema_version(self) -> int:
        with self.cursor() as cur:
            return cur.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]

    def close(self) -> None:
        self.closed = True
        self.human_sync.stop()  # its pass in progress ends first: it writes on this file
        self._con.close()
        if self.temporary is not None:
            shutil.rmtree(self.temporary, ignore_errors=True)

    def query(self, sql: str, params: list[Any] | None = None) -> pd.DataFrame:
        """Runs one read and returns its rows as a frame."""
        with self.cursor() as cur:
            return cur.execute(sql, params or []).df()

    def execute(self, sql: str, params: list[Any] | None = None) -> None:
        """Runs one write of what people make (labels, preferences, samples); see
        :meth:`writing`. A ``COPY ... TO`` file is a read: run it on a :meth:`cursor`."""
        with self.writing("edits") as cur:
            self._human_read = None  # it may change human_files: read it again next sync
            cur.execute(sql, params or [])

    # -- ingest ---------------------------------------------------------------------------

    def ingest_all(self, jobs_dir: Path) -> int:
        """Ingests every job folder and forgets jobs whose folder is gone; returns the
        number of new result lines.

        A folder that cannot be read is that job's problem: it is skipped and its reason
        kept in :attr:`unreadable` (job id -> reason) for the pages to show.
        """
        self.sync_human()  # what was appended by any process: a stat per file when nothing
        folders = list_jobs(jobs_dir)
        self.forget_missing(jobs_dir, {job.job_id for job in folders})
        new_rows, unreadable = 0, {}
        for job in folders:
            if self._ingested.get(job.job_id) == _files_signature(job):
                continue  # nothing changed since it was read (a page reruns in milliseconds)
            try:
                new_rows += self.ingest(job)
            except JobUnreadable as exc:
                unreadable[job.job_id] = exc.reason
        self.unreadable = unreadable
        return new_rows

    def forget_missing(self, jobs_dir: Path, present: set[str]) -> None:
        """Drops the rows of jobs whose folder under ``jobs_dir`` is gone (the folder is the
        truth). Review labels and samples stay: they are people's work, kept for export."""
        with self.cursor() as cur:  # a read on every page's rerun: no writer waits for it
            known = cur.execute("SELECT job_id, folder FROM jobs").fetchall()
        gone = [j for j, f in known if j not in present and Path(f).parent == jobs_dir]
        if not gone:
            return
        with self.writing("index", "checks") as cur:
            tables = ("results", "requests", "ingest_state", "job_events", "jobs", "job_facets")
            for table in (*tables, "rule_outcomes", "rule_runs"):  # outcomes: from rules.yaml
                cur.execute(f"DELETE FROM {table} WHERE list_contains(?, job_id)", [gone])
            # a judge's verdicts go with its folder
            cur.execute("DELETE FROM judge_links WHERE list_contains(?, judge_job)", [gone])
            forget_vectors(cur, gone)
        for job_id in gone:
            self._ingested.pop(job_id, None)

    def ingest(self, job: JobFolder) -> int:
        """Brings one job folder's state and new result lines into the store.

        Raises:
            JobUnreadable: its folder cannot be read, or a result line is not JSON (the
                reason names the file and line; the lines before it are kept).
        """
        signature = _files_signature(job)  # before reading: a change while it reads is new
        spec = job.read_spec()  # raises JobUnreadable, before anything is written
        status = job.read_status()
        name = job.name  # a rename's name.txt, else job.json's (also raises JobUnreadable)
        job_id = job.job_id  # the folder's name, never an id written inside it
        # One ingest at a time (the jobs watcher's and a page's): each reads on from the
        # offsets the last one left.
        with self.writing() as cur:
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
                    job_seconds(status),
                ],
            )
            if spec.judge is not None:
                link = spec.judge
                cur.execute(
                    "INSERT OR REPLACE INTO judge_links VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        job_id,
                        link.kind,
                        list(link.graded),
                        link.check,
                        link.split,
                        list(link.values),
                        link.on,
                    ],
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
            try:
                names = (spec.answer_names(), spec.unmapped_name)
                failed_rows, errors_offset = self._load_results(
                    cur, job, job.errors, errors_offset, names
                )
                new_rows, output_offset = self._load_results(
                    cur, job, job.output, output_offset, names
                )
            except CorruptLine as exc:  # the job's problem, named with its file and line
                raise JobUnreadable(job_id, str(exc)) from None
            cur.execute(
                "INSERT OR REPLACE INTO ingest_state VALUES (?, true, ?, ?)",
                [job_id, output_offset, errors_offset or 0],
            )
        self._ingested[job_id] = signature
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
        self,
        cur: duckdb.DuckDBPyConnection,
        job: JobFolder,
        path: Path,
        offset: int,
        names: FailureNames,
    ) -> tuple[int, int]:
        """Upserts the complete lines of a result file past ``offset``; a success is never
        replaced by a failure (a retried request's old error stays in errors.jsonl).
        ``names``: the model a failure counts under (:data:`FailureNames`)."""
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
            raws = [r.decode("utf-8", "replace") for r in found]
            total += self._upsert_results(cur, job, raws, names)
            offset = after

    def _upsert_results(
        self,
        cur: duckdb.DuckDBPyConnection,
        job: JobFolder,
        raws: list[str],
        names: FailureNames,
    ) -> int:
        mapped, unmapped = names
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
                "reused_from",
            ]  # fmt: skip
            updates = ", ".join(f"{c} = excluded.{c}" for c in columns)
            # Request fields ride along (a failure gets the model its body.model maps to, an
            # adapter's own name included, else the job's model) so reads need no join;
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
                       coalesce(f.model, MAP(?::VARCHAR[], ?::VARCHAR[])[q.model], ?, j.model)
                           AS model,
                       q.line_no, q.prompt, q.prompt_version, q.metadata,
                       {SEARCH_TEXT_SQL.format(prompt_lower="q.prompt_lower", answer="f.answer")}
                           AS search_text
                FROM rows f
                LEFT JOIN requests q ON q.job_id = ? AND q.custom_id = f.custom_id
                LEFT JOIN jobs j ON j.job_id = ?
                ON CONFLICT (job_id, custom_id) DO UPDATE SET {updates}
                WHERE results.status <> 'succeeded' OR excluded.status = 'succeeded'
                """,
                [
                    RESULT_SHAPE,
                    job.job_id,
                    job.job_id,
                    list(mapped),
                    list(mapped.values()),
                    unmapped,
                    job.job_id,
                    job.job_id,
                ],
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
        with self.cursor() as cur:  # one statement: a page asks on every rerun
            row = cur.execute(
                f"SELECT * FROM (SELECT count(*), max(name), string_agg(state, ',' ORDER BY "
                f"job_id), bool_or(state NOT IN ('completed', 'failed', 'cancelled', "
                f"'expired')) FROM jobs {scope}), "
                f"(SELECT count(*), max(updated_at) FROM reviews {scope}), "
                f"(SELECT count(*), max(graded_at) FROM rule_runs {scope}), "  # regraded
                f"(SELECT coalesce(sum(output_offset), 0) + coalesce(sum(errors_offset), 0) "
                f"FROM ingest_state {scope})",
                params * 4,
            ).fetchone()
        jobs, labels, lines = row[:4], row[4:8], row[8:]
        if jobs[3]:  # running: a time bucket instead of the offsets
            return (*jobs[:3], *labels, int(time.time() // live_seconds))
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
