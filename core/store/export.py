"""Exports of results, samples with labels, and review tallies, written by DuckDB ``COPY``.

CSV, Parquet and JSONL leave DuckDB straight for the file, so a million rows never pass
through pandas. JSONL of results is the OpenAI batch output format: each line is the
stored raw output line, unchanged (an embeddings line gets its vectors back, which the
store keeps in its vector tables). Excel goes through pandas and openpyxl, so it is capped
at :data:`EXCEL_MAX_ROWS` rows with a clear message past that.

Text from a file or a model is data, never a formula: in CSV and Excel a text cell that a
spreadsheet would run (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return) gets a leading ``'``, as OWASP advises against CSV injection. JSONL and Parquet
keep the data unchanged (no spreadsheet reads them as formulas).

A results export may be redacted (``redact``): every text cell, in every format, has its
sensitive items (:mod:`core.check.sensitive`: e-mail addresses, phone numbers, card
numbers, IBANs, IP addresses, credentials) replaced by placeholders, numbered per cell
(``[EMAIL_1]``), by a function DuckDB calls as it writes the file; phone numbers without a
+country code are read as the studio's region (Settings, Sensitive data), read once per
export.

The pages' downloads are written in a folder of each export's own under ``exports/``
(:func:`export_folder`), read into the download and removed: two sessions exporting the same
job never share a file, nobody is served another's filter or a half-written file, and
nothing stays behind. What a crash leaves there is removed by the next export a day later.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from core.check.sensitive import check_region, phone_region_now, redact, worth_a_look
from core.store.checks import ExportChecks, export_checks
from core.store.db import Store
from core.store.results import FROM, ResultFilter, where
from core.store.vector_ingest import restore_vectors

FORMATS = ("csv", "parquet", "jsonl", "xlsx")
EXCEL_MAX_ROWS = 200_000
# Excel (openpyxl) refuses these control characters in cells; they are dropped there only.
_ILLEGAL_EXCEL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
# What makes a spreadsheet read a cell as a formula, at the start of a text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_RESTORE_BATCH = 10_000  # embeddings lines rebuilt at a time (~30 MB of float lists)
# A leftover in exports/ older than this is removed; no export runs near this long.
EXPORT_KEEP_SECONDS = 24 * 3600


def exports_dir(home: Path) -> Path:
    return home / "exports"


def sweep_exports(home: Path, keep_seconds: float = EXPORT_KEEP_SECONDS) -> int:
    """Removes what is older than ``keep_seconds`` in ``exports/`` (a crashed export's
    folder, the fixed-name files exports were once written to); returns how many."""
    cutoff = time.time() - keep_seconds
    removed = 0
    try:
        entries = list(exports_dir(home).iterdir())
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            if entry.lstat().st_mtime >= cutoff:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed += 1
        except FileNotFoundError:  # another session's sweep took it first
            continue
    return removed


@contextmanager
def export_folder(home: Path) -> Iterator[Path]:
    """A new folder of this export's own under ``exports/``, removed with what it holds
    when the block ends: write the export there and read it before the block ends."""
    folder = exports_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    sweep_exports(home)
    own = Path(tempfile.mkdtemp(prefix="export-", dir=folder))
    try:
        yield own
    finally:
        shutil.rmtree(own, ignore_errors=True)


def inert(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, made plain text with a leading '."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def redact_text(value: str | None, region: str) -> str | None:
    """``value`` with each sensitive item replaced by a placeholder (:func:`redact`; phone
    numbers without a country code read as ``region``'s)."""
    if value is None or not worth_a_look(value.encode("utf-8", "surrogatepass")):
        return value
    return redact([value], region)[0][0]


REDACT_SQL = "redact_text"  # the name DuckDB calls :func:`redact_text` by


def _redact_sql(column: str, region: str) -> str:
    """:func:`redact_text` as a DuckDB expression over a text column (the region is one of
    libphonenumber's codes, checked: two letters, safe as a literal)."""
    return f"{REDACT_SQL}({column}, '{check_region(region)}')"


def _with_redaction(cur: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """The cursor, able to call :data:`REDACT_SQL` (registered at the first export that
    redacts: DuckDB keeps it for the database's connections from then on)."""
    with contextlib.suppress(duckdb.CatalogException):  # registered already
        cur.create_function(
            REDACT_SQL, redact_text, ["VARCHAR", "VARCHAR"], "VARCHAR", side_effects=False
        )
    return cur


def _inert_sql(column: str) -> str:
    """:func:`inert` as a DuckDB expression over a text column."""
    starts = ", ".join(f"chr({ord(c)})" for c in FORMULA_STARTS)
    return f"CASE WHEN left({column}, 1) IN ({starts}) THEN chr(39) || {column} ELSE {column} END"


# Each result with its labels: one text per reviewer joined, so the file stays flat.
_LABELS = """
LEFT JOIN (
    SELECT job_id, custom_id,
           string_agg(reviewer || '=' || verdict, '; ' ORDER BY reviewer) AS review_verdicts,
           avg(score) AS review_mean_score,
           array_to_string(list_sort(list_distinct(flatten(list(tags)))), ', ') AS review_tags,
           string_agg(reviewer || ': ' || comment, ' | ' ORDER BY reviewer) AS review_comments,
           max(corrected_answer) AS corrected_answer
    FROM reviews
    GROUP BY job_id, custom_id
) v ON v.job_id = r.job_id AND v.custom_id = r.custom_id
"""
# Each row's job by its name too (an id alone says nothing to whoever opens the file).
_JOB_NAME = "LEFT JOIN jobs j ON j.job_id = r.job_id"
_RESULT_COLUMNS = """
r.job_id, coalesce(j.name, '') AS job_name, r.custom_id, r.line_no, r.status, r.status_code,
r.model, r.prompt_version,
r.finish_reason, r.prompt_tokens, r.completion_tokens, r.latency_ms,
-- the job a reused answer was made by: why it has no latency (it was not computed here)
r.reused_from, r.prompt, r.answer,
r.tool_calls, r.error_code,
r.error_message, CAST(r.metadata AS VARCHAR) AS metadata, r.created_at,
v.review_verdicts, v.review_mean_score, v.review_tags, v.review_comments, v.corrected_answer
"""


class ExportError(ValueError):
    """An export that cannot be written; the message says what to do instead."""


def _check_format(fmt: str) -> str:
    fmt = fmt.lower().lstrip(".")
    fmt = {"xls": "xlsx", "excel": "xlsx", "json": "jsonl", "pq": "parquet"}.get(fmt, fmt)
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return fmt


def _copy(
    store: Store, sql: str, params: list[Any], path: Path, fmt: str, region: str | None = None
) -> int:
    """Writes a query's rows to ``path`` (``region``: its texts redacted, phone numbers
    without a country code read as that region's; None: not redacted); returns the row
    count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    redact = region is not None
    if region is not None:
        sql = _text_columns(store, sql, params, lambda column: _redact_sql(column, region))
    if fmt == "xlsx":
        return _excel(store, sql, params, path, redact)
    options = {
        "csv": "FORMAT csv, HEADER true",
        "parquet": "FORMAT parquet, COMPRESSION zstd",
        "jsonl": "FORMAT json",
    }[fmt]
    # COPY takes its file name as a literal, not a parameter: quote it (quotes doubled).
    target = "'" + str(path).replace("'", "''") + "'"
    copied = _text_columns(store, sql, params, _inert_sql, redact) if fmt == "csv" else sql
    with store.cursor() as cur:  # a read: no write waits for it
        if redact:
            _with_redaction(cur)
        # COPY answers the rows it wrote: counting them again would run the query twice
        return int(cur.execute(f"COPY ({copied}) TO {target} ({options})", params).fetchone()[0])


def _text_columns(
    store: Store, sql: str, params: list[Any], wrap: Callable[[str], str], redact: bool = False
) -> str:
    """``sql`` with every text column passed through ``wrap`` (an expression of it):
    :func:`inert` for CSV, the redaction for a redacted export."""
    with store.cursor() as cur:
        if redact:  # ``sql`` calls it already
            _with_redaction(cur)
        cur.execute(f"SELECT * FROM ({sql}) LIMIT 0", params)
        columns = [(name, str(kind)) for name, kind, *_ in cur.description]
    exprs = []
    for name, kind in columns:
        quoted = '"' + name.replace('"', '""') + '"'
        exprs.append(f"{wrap(quoted)} AS {quoted}" if kind == "VARCHAR" else quoted)
    return f"SELECT {', '.join(exprs)} FROM ({sql})"


def _write_excel(frame: pd.DataFrame, path: Path) -> None:
    """A frame to .xlsx with text made inert and characters Excel refuses dropped."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object:
            frame[column] = frame[column].map(
                lambda v: inert(_ILLEGAL_EXCEL.sub("", v)) if isinstance(v, str) else v
            )
        elif hasattr(frame[column].dtype, "tz") and frame[column].dtype.tz is not None:
            frame[column] = frame[column].dt.tz_localize(None)  # Excel has no time zones
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_excel(path, index=False, engine="openpyxl")


def _raw_lines(
    store: Store,
    sql: str,
    params: list[Any],
    path: Path,
    job_ids: list[str],
    region: str | None = None,
) -> int:
    """Writes one stored JSON line per row (columns ``job_id``, ``custom_id``, ``raw``, of
    ``job_ids``) as JSONL: byte for byte, except that an embeddings line gets back the
    vectors its stored copy leaves out (``vector_ingest.restore_vectors``), and that a
    redacted export (``region``, as :func:`_copy`'s) has each line's sensitive items
    replaced (a placeholder is plain text, so each line stays the JSON it was)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    redact = region is not None
    with_vectors = "SELECT 1 FROM vector_jobs WHERE list_contains(?, job_id) LIMIT 1"
    if store.query(with_vectors, [list(job_ids)]).empty:
        target = "'" + str(path).replace("'", "''") + "'"
        raw = _redact_sql("raw", region) if region is not None else "raw"
        # A CSV with no quoting and a delimiter JSON never holds raw (control characters
        # are always escaped in JSON) writes each stored line unchanged.
        with store.cursor() as cur:  # a read: no write waits for it
            if redact:
                _with_redaction(cur)
            copied = cur.execute(
                f"COPY (SELECT {raw} FROM ({sql})) TO {target} "
                "(FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\x1f')",
                params,
            )
            return int(copied.fetchone()[0])  # the rows written
    rows = 0
    with store.cursor() as cur, store.cursor() as vectors, path.open("w", encoding="utf-8") as out:
        batches = cur.execute(sql, params).to_arrow_reader(_RESTORE_BATCH)  # in its order
        for batch in batches:
            columns = [batch.column(name).to_pylist() for name in ("job_id", "custom_id", "raw")]
            lines = restore_vectors(vectors, *columns)
            out.writelines(
                (redact_text(line, region) if region is not None else line) + "\n" for line in lines
            )
            rows += batch.num_rows
    return rows


def _excel(store: Store, sql: str, params: list[Any], path: Path, redact: bool = False) -> int:
    with store.cursor() as cur:
        if redact:
            _with_redaction(cur)
        rows = int(cur.execute(f"SELECT count(*) FROM ({sql})", params).fetchone()[0])
        if rows > EXCEL_MAX_ROWS:
            raise ExportError(
                f"{rows:,} rows is more than the Excel export takes ({EXCEL_MAX_ROWS:,}); "
                "narrow the filter, or export CSV or Parquet (no limit)"
            )
        frame = cur.execute(sql, params).df()
    _write_excel(frame, path)
    return rows


def export_results(
    store: Store,
    f: ResultFilter,
    path: str | Path,
    fmt: str = "csv",
    redact: bool = False,
    phone_region: str | None = None,
) -> int:
    """Filtered results (with their labels, and a ``check_<rule>`` column per rule the jobs
    were graded with) to a file. JSONL is the OpenAI output format: each stored line, with
    the checks' outcomes added as one more top-level field, ``checks`` (a line's fields
    are kept as they were, byte for byte, so readers of OpenAI's format read it).
    ``redact``: every text with its sensitive items as placeholders (see the module doc),
    phone numbers without a country code read as ``phone_region``'s (default the studio's,
    Settings).

    Returns:
        The number of rows written.
    """
    fmt, path = _check_format(fmt), Path(path)
    region = (phone_region or phone_region_now()) if redact else None
    clause, params = where(f)
    order = "ORDER BY r.job_id, r.line_no, r.custom_id"
    checks = export_checks(store, f.job_ids)
    if fmt == "jsonl":
        raw = _with_checks("r.raw", checks)
        sql = f"SELECT r.job_id, r.custom_id, {raw} AS raw {FROM} {checks.join} {clause} {order}"
        return _raw_lines(store, sql, [*checks.params, *params], path, f.job_ids, region)
    columns = f"{_RESULT_COLUMNS}, {checks.columns}" if checks.columns else _RESULT_COLUMNS
    sql = f"SELECT {columns} {FROM} {_JOB_NAME} {_LABELS} {checks.join} {clause} {order}"
    return _copy(store, sql, [*checks.params, *params], path, fmt, region)


def export_errors(store: Store, job_ids: list[str], path: str | Path) -> int:
    """The failed requests' output lines (OpenAI's error file) as JSONL."""
    f = ResultFilter(job_ids=job_ids, statuses=["failed"])
    return export_results(store, f, path, "jsonl")


def _job_ids(store: Store, sql: str, params: list[Any]) -> list[str]:
    """The job ids ``sql`` selects (its first column)."""
    return [str(j) for j in store.query(sql, params).iloc[:, 0]]


def _with_checks(raw: str, checks: ExportChecks) -> str:
    """A stored output line with the checks' outcomes added as its last field, ``checks``."""
    if not checks.join:
        return raw
    line = f"rtrim(CAST({raw} AS VARCHAR))"
    return f"left({line}, -1) || ', \"checks\": ' || CAST({checks.as_json} AS VARCHAR) || '}}'"


def export_sample(store: Store, sample_id: str, path: str | Path, fmt: str = "csv") -> int:
    """A sample's items in order, with every reviewer's label (one row per item) and the
    checks' outcomes (rules and judges) of their jobs."""
    fmt, path = _check_format(fmt), Path(path)
    jobs = _job_ids(
        store, "SELECT DISTINCT job_id FROM sample_items WHERE sample_id = ?", [sample_id]
    )
    checks = export_checks(store, jobs)
    if fmt == "jsonl":
        sql = f"""SELECT r.job_id, r.custom_id, {_with_checks("r.raw", checks)} AS raw
                 FROM sample_items i
                 JOIN results r ON r.job_id = i.job_id AND r.custom_id = i.custom_id
                 {checks.join}
                 WHERE i.sample_id = ? ORDER BY i.position"""
        return _raw_lines(store, sql, [*checks.params, sample_id], path, jobs)
    columns = f"{_RESULT_COLUMNS}, {checks.columns}" if checks.columns else _RESULT_COLUMNS
    sql = f"""
        SELECT i.sample_id, i.position, i.stratum, {columns}
        FROM sample_items i
        JOIN results r ON r.job_id = i.job_id AND r.custom_id = i.custom_id
        {_JOB_NAME}
        {_LABELS}
        {checks.join}
        WHERE i.sample_id = ?
        ORDER BY i.position
    """
    return _copy(store, sql, [*checks.params, sample_id], path, fmt)


def export_labels(store: Store, path: str | Path, fmt: str = "csv") -> int:
    """Every label, one row per result and reviewer, with the checks' outcomes (rules and
    judges) of the labelled result: where a person and a check both graded it."""
    fmt, path = _check_format(fmt), Path(path)
    checks = export_checks(store, _job_ids(store, "SELECT DISTINCT job_id FROM reviews", []))
    extra = f", {checks.columns}" if checks.columns else ""
    sql = f"""SELECT r.job_id, coalesce(j.name, '') AS job_name, r.custom_id, r.reviewer,
                    r.verdict, r.score,
                    array_to_string(r.tags, ', ') AS tags, r.comment, r.corrected_answer,
                    CAST(r.answers AS VARCHAR) AS answers, r.sample_id, r.updated_at{extra}
             FROM reviews r {_JOB_NAME} {checks.join}
             ORDER BY r.job_id, r.custom_id, r.reviewer"""
    return _copy(store, sql, list(checks.params), path, fmt)


def export_tally(store: Store, path: str | Path, fmt: str = "csv", by: str = "job_id") -> int:
    """Review tallies (verdict counts, pass rate and its 95% interval) per ``by``."""
    from core.store.review import tally  # the tally is small: computed in pandas, then written

    frame = tally(store, by)
    if by == "job_id":
        frame.insert(1, "job_name", frame["job_id"].map(store.job_names()).fillna(""))
    return write_frame(frame, path, fmt)


def write_frame(frame: pd.DataFrame, path: str | Path, fmt: str = "csv") -> int:
    """A small table computed in pandas (a tally, an experiment's matrix) written as
    ``fmt`` by the rules of every export: text inert in CSV and Excel, Excel capped at
    :data:`EXCEL_MAX_ROWS`; Parquet and JSONL through DuckDB. Returns the rows written.

    Raises:
        ExportError: an unknown format, or too many rows for Excel.
    """
    fmt, path = _check_format(fmt), Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "xlsx":
        if len(frame) > EXCEL_MAX_ROWS:
            raise ExportError(f"Excel takes at most {EXCEL_MAX_ROWS:,} rows; use CSV or Parquet")
        _write_excel(frame, path)
    elif fmt == "csv":
        frame.map(inert).to_csv(path, index=False)
    else:
        target = "'" + str(path).replace("'", "''") + "'"
        options = "FORMAT json" if fmt == "jsonl" else "FORMAT parquet"
        con = duckdb.connect()  # in memory: the frame is the only table
        try:
            con.register("frame", frame)
            con.execute(f"COPY (SELECT * FROM frame) TO {target} ({options})")
        finally:
            con.close()
    return len(frame)
