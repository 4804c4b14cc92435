"""The values the Results filters can take, per job, kept in the index (``job_facets``).

A job's facets are read from every one of its results (five scans; finding the metadata
keys parses each line's metadata: most of a second at a million results), so they are kept
with the number of result-file bytes ingested when they were read (``ingest_state``):
while that is unchanged they are exact, for every session and after a restart; once more
lines come (a resume, a retry) they are read again. A job that ends has them read right
after its last ingest (:func:`keep_in_background`), before anyone opens its results.
"""

from __future__ import annotations

import json
import logging
import threading

import duckdb

from core.schemas import COMPLETED_WITH_ERRORS, FINAL_STATES
from core.store.db import Store

log = logging.getLogger(__name__)

# The states of jobs whose results no longer change by themselves (as grading's)
ENDED = {s.value for s in FINAL_STATES} | {COMPLETED_WITH_ERRORS, "interrupted"}

FACETS: dict[str, str] = {  # filter -> the SQL of its value over results r
    "statuses": "r.status",
    "finish_reasons": "coalesce(r.finish_reason, '(none)')",
    "models": "r.model",
    "prompt_versions": "r.prompt_version",
}
NAMES = (*FACETS, "metadata_keys")


def job_facets(store: Store, job_id: str) -> dict[str, list[str]]:
    """One job's filter values (each sorted), kept while its ingested lines are unchanged."""
    with store.cursor() as cur:
        cur.execute("BEGIN")  # one snapshot: the lines counted are the lines read
        try:
            kept = cur.execute(
                "SELECT s.output_offset + coalesce(s.errors_offset, 0), f.lines, f.facets "
                "FROM ingest_state s LEFT JOIN job_facets f ON f.job_id = s.job_id "
                "WHERE s.job_id = ?",
                [job_id],
            ).fetchone()
            if kept is not None and kept[2] is not None and kept[1] == kept[0]:
                return json.loads(kept[2])
            made = _read(cur, job_id)
        finally:
            cur.execute("COMMIT")
    if kept is not None:  # an indexed job: kept for the next reader
        with store.writing() as cur:
            cur.execute(
                "INSERT OR REPLACE INTO job_facets VALUES (?, ?, ?)",
                [job_id, kept[0], json.dumps(made)],
            )
    return made


def _read(cur: duckdb.DuckDBPyConnection, job_id: str) -> dict[str, list[str]]:
    out = {}
    for name, expr in FACETS.items():
        rows = cur.execute(
            f"SELECT DISTINCT {expr} AS v FROM results r "
            f"WHERE r.job_id = ? AND {expr} IS NOT NULL ORDER BY v",
            [job_id],
        ).fetchall()
        out[name] = [str(v) for (v,) in rows]
    rows = cur.execute(
        "SELECT DISTINCT unnest(json_keys(r.metadata)) AS k FROM results r "
        "WHERE r.job_id = ? AND r.metadata IS NOT NULL ORDER BY k",
        [job_id],
    ).fetchall()
    out["metadata_keys"] = [str(k) for (k,) in rows]
    return out


def jobs_facets(store: Store, job_ids: list[str]) -> dict[str, list[str]]:
    """The filter values of these jobs together: each job's, united and sorted."""
    each = [job_facets(store, job_id) for job_id in dict.fromkeys(job_ids)]
    return {name: sorted({v for f in each for v in f[name]}) for name in NAMES}


def keep_in_background(store: Store, job_id: str) -> None:
    """Reads a job's facets on a thread of its own once it has ended (the jobs watcher
    calls this after each ingest; a running job's change on every ingest, so they are read
    when a page asks)."""
    with store.cursor() as cur:
        row = cur.execute("SELECT state FROM jobs WHERE job_id = ?", [job_id]).fetchone()
    if row is None or row[0] not in ENDED:
        return

    def keep() -> None:
        try:
            job_facets(store, job_id)
        except Exception:  # the store closed, or the job went: read when a page asks
            log.warning("reading the facets of %s failed", job_id, exc_info=True)

    threading.Thread(target=keep, name="facets", daemon=True).start()
