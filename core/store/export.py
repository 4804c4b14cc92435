"""Exports of results, samples with labels, and review tallies, written by DuckDB ``COPY``.

CSV, Parquet and JSONL leave DuckDB straight for the file, so a million rows never pass
through pandas. JSONL of results is the OpenAI batch output format: each line is the
stored raw output line, unchanged. Excel goes through pandas and openpyxl, so it is capped
at :data:`EXCEL_MAX_ROWS` rows with a clear message past that.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from core.store.db import Store
from core.store.results import FROM, ResultFilter, where

FORMATS = ("csv", "parquet", "jsonl", "xlsx")
EXCEL_MAX_ROWS = 200_000
# Excel (openpyxl) refuses these control characters in cells; they are dropped there only.
_ILLEGAL_EXCEL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")

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
_RESULT_COLUMNS = """
r.job_id, r.custom_id, r.line_no, r.status, r.status_code, r.model, r.prompt_version,
r.finish_reason, r.prompt_tokens, r.completion_tokens, r.latency_ms, r.prompt, r.answer,
r.error_code,
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


def _copy(store: Store, sql: str, params: list[Any], path: Path, fmt: str) -> int:
    """Writes a query's rows to ``path``; returns the row count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "xlsx":
        return _excel(store, sql, params, path)
    options = {
        "csv": "FORMAT csv, HEADER true",
        "parquet": "FORMAT parquet, COMPRESSION zstd",
        "jsonl": "FORMAT json",
    }[fmt]
    # COPY takes its file name as a literal, not a parameter: quote it (quotes doubled).
    target = "'" + str(path).replace("'", "''") + "'"
    store.execute(f"COPY ({sql}) TO {target} ({options})", params)
    return _count(store, sql, params)


def _count(store: Store, sql: str, params: list[Any]) -> int:
    return int(store.query(f"SELECT count(*) AS n FROM ({sql})", params)["n"].iloc[0])


def _raw_lines(store: Store, sql: str, params: list[Any], path: Path) -> int:
    """Writes one stored JSON line per row (column ``raw``), byte for byte, as JSONL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    target = "'" + str(path).replace("'", "''") + "'"
    # A CSV with no quoting and a delimiter JSON never holds raw (control characters are
    # always escaped in JSON) writes each stored line unchanged.
    store.execute(
        f"COPY (SELECT raw FROM ({sql})) TO {target} "
        "(FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\x1f')",
        params,
    )
    return _count(store, sql, params)


def _excel(store: Store, sql: str, params: list[Any], path: Path) -> int:
    rows = _count(store, sql, params)
    if rows > EXCEL_MAX_ROWS:
        raise ExportError(
            f"{rows:,} rows is more than the Excel export takes ({EXCEL_MAX_ROWS:,}); "
            "narrow the filter, or export CSV or Parquet (no limit)"
        )
    frame = store.query(sql, params)
    for column in frame.columns:
        if frame[column].dtype == object:
            frame[column] = frame[column].map(
                lambda v: _ILLEGAL_EXCEL.sub("", v) if isinstance(v, str) else v
            )
        elif hasattr(frame[column].dtype, "tz") and frame[column].dtype.tz is not None:
            frame[column] = frame[column].dt.tz_localize(None)  # Excel has no time zones
    frame.to_excel(path, index=False, engine="openpyxl")
    return rows


def export_results(store: Store, f: ResultFilter, path: str | Path, fmt: str = "csv") -> int:
    """Filtered results (with their labels) to a file; JSONL is the OpenAI output format.

    Returns:
        The number of rows written.
    """
    fmt, path = _check_format(fmt), Path(path)
    clause, params = where(f)
    order = "ORDER BY r.job_id, r.line_no, r.custom_id"
    if fmt == "jsonl":
        return _raw_lines(store, f"SELECT r.raw {FROM} {clause} {order}", params, path)
    return _copy(
        store, f"SELECT {_RESULT_COLUMNS} {FROM} {_LABELS} {clause} {order}", params, path, fmt
    )


def export_errors(store: Store, job_ids: list[str], path: str | Path) -> int:
    """The failed requests' output lines (OpenAI's error file) as JSONL."""
    f = ResultFilter(job_ids=job_ids, statuses=["failed"])
    return export_results(store, f, path, "jsonl")


def export_sample(store: Store, sample_id: str, path: str | Path, fmt: str = "csv") -> int:
    """A sample's items in order, with every reviewer's label (one row per item)."""
    fmt, path = _check_format(fmt), Path(path)
    if fmt == "jsonl":
        sql = """SELECT r.raw FROM sample_items i
                 JOIN results r ON r.job_id = i.job_id AND r.custom_id = i.custom_id
                 WHERE i.sample_id = ? ORDER BY i.position"""
        return _raw_lines(store, sql, [sample_id], path)
    sql = f"""
        SELECT i.sample_id, i.position, i.stratum, {_RESULT_COLUMNS}
        FROM sample_items i
        JOIN results r ON r.job_id = i.job_id AND r.custom_id = i.custom_id
        {_LABELS}
        WHERE i.sample_id = ?
        ORDER BY i.position
    """
    return _copy(store, sql, [sample_id], path, fmt)


def export_labels(store: Store, path: str | Path, fmt: str = "csv") -> int:
    """Every label, one row per result and reviewer."""
    fmt, path = _check_format(fmt), Path(path)
    sql = """SELECT job_id, custom_id, reviewer, verdict, score,
                    array_to_string(tags, ', ') AS tags, comment, corrected_answer,
                    sample_id, updated_at
             FROM reviews ORDER BY job_id, custom_id, reviewer"""
    return _copy(store, sql, [], path, fmt)


def export_tally(store: Store, path: str | Path, fmt: str = "csv", by: str = "job_id") -> int:
    """Review tallies (verdict counts, pass rate and its 95% interval) per ``by``."""
    from core.store.review import tally  # the tally is small: computed in pandas, then written

    fmt, path = _check_format(fmt), Path(path)
    frame = tally(store, by)
    with store.cursor() as cur:
        cur.register("tally_frame", frame)
        try:
            sql = "SELECT * FROM tally_frame"
            if fmt == "xlsx":
                path.parent.mkdir(parents=True, exist_ok=True)
                frame.to_excel(path, index=False, engine="openpyxl")
            elif fmt == "jsonl":
                target = "'" + str(path).replace("'", "''") + "'"
                cur.execute(f"COPY ({sql}) TO {target} (FORMAT json)")
            else:
                target = "'" + str(path).replace("'", "''") + "'"
                options = "FORMAT csv, HEADER true" if fmt == "csv" else "FORMAT parquet"
                cur.execute(f"COPY ({sql}) TO {target} ({options})")
        finally:
            cur.unregister("tally_frame")
    return len(frame)
