"""Browsing results in DuckDB: filters, full-text search, sorting and pages.

Every query is built from fixed SQL fragments and bound parameters: what a user types
(search text, metadata keys and values) only ever travels as a parameter, so quotes,
``%``, regex characters or SQL fragments are searched for literally.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pandas as pd
from pydantic import Field

from core.schemas import JobState, JobStatus, Model
from core.store.checks import Outcome, outcome_clause, rule_names
from core.store.db import Store
from core.store.facets import jobs_facets
from core.store.schema import SHOWN_ANSWER_SQL
from core.store.vector_ingest import restore_vectors

# Ingest copies the request's fields (line_no, prompt, metadata...) into `results`, and the
# job's model into failures, so every query here reads one table: no join over a million rows.
FROM = "FROM results r"

# Column name shown to the user -> the SQL expression behind it (the only sortable names).
COLUMNS: dict[str, str] = {
    "job_id": "r.job_id",
    "custom_id": "r.custom_id",
    "line_no": "r.line_no",
    "status": "r.status",
    "finish_reason": "r.finish_reason",
    "model": "r.model",
    "prompt_version": "r.prompt_version",
    "prompt_tokens": "r.prompt_tokens",
    "completion_tokens": "r.completion_tokens",
    "latency_ms": "r.latency_ms",
    "prompt": "r.prompt",
    "answer": "r.answer",
    "tool_calls": "r.tool_calls",  # name(arguments), one call a line
    "error_message": "r.error_message",
    "created_at": "r.created_at",
    "metadata": "CAST(r.metadata AS VARCHAR)",  # sorts as its JSON text
}
PREVIEW_CHARS = 300  # the table shows the start of long texts; the detail view shows all
PREVIEWED = ("prompt", "answer", "tool_calls", "error_message", "metadata")
METADATA_SORT = "metadata."  # "metadata.KEY" sorts by one metadata field (as text)
SEARCH_FIELDS = ("prompt", "answer", "both")
DEEP_PAGE = 5_000  # from this offset on, a page is found by its keys first
# A search reads every prompt and answer to count all its matches (~300 ms at a million
# rows); it counts up to this many, then says "more than", unless asked for the exact count.
SEARCH_COUNT_CAP = 1_000


TokenRange = tuple[Annotated[int, Field(ge=0)] | None, Annotated[int, Field(ge=0)] | None]


class ResultFilter(Model):
    """What a user narrowed the results to; empty fields do not filter. Saved with a sample
    (as JSON through pydantic), so a sample can be redrawn from it.

    Attributes:
        job_ids: the jobs to read (at least one).
        statuses: ``succeeded`` / ``failed``.
        finish_reasons: e.g. ``stop``, ``length``; ``(none)`` matches a missing reason.
        models: the model that answered (the job's model for failures).
        prompt_versions: ``metadata.prompt_version`` values.
        metadata: metadata key -> required value (compared as text).
        prompt_tokens: inclusive ``(low, high)``; either end may be None.
        completion_tokens: inclusive ``(low, high)``; either end may be None.
        search: text to find, case-insensitive, taken literally.
        search_in: ``prompt``, ``answer`` or ``both``.
        match_case: exact case (about twice as fast on a million rows).
        checks: rule name -> the outcome required (``passed``, ``failed``, ``not_graded``):
            e.g. the failures of one rule, to read or to sample for review.
    """

    job_ids: list[str]
    statuses: list[Literal["succeeded", "failed"]] = Field(default_factory=list)
    finish_reasons: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)
    prompt_versions: list[str] = Field(default_factory=list)
    metadata: dict[str, str] = Field(default_factory=dict)
    prompt_tokens: TokenRange = (None, None)
    completion_tokens: TokenRange = (None, None)
    search: str = ""
    search_in: Literal["prompt", "answer", "both"] = "both"
    match_case: bool = False
    checks: dict[str, Outcome] = Field(default_factory=dict)


def metadata_path(key: str) -> str:
    """The JSON path of one metadata key, quoted: DuckDB reads a bare string that starts
    with ``$`` as a path, so a key such as ``$[`` would fail and ``$.x`` read another field."""
    return '$."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _in_list(expr: str, values: list[str], params: list[Any]) -> str:
    params.append([str(v) for v in values])
    return f"list_contains(?, {expr})"  # one list parameter; faster than IN (?, ?, ...)


def where(f: ResultFilter) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause and its parameters for a filter."""
    if not f.job_ids:
        return "WHERE false", []
    params: list[Any] = []
    clauses = [_in_list("r.job_id", list(f.job_ids), params)]
    if f.statuses:
        clauses.append(_in_list("r.status", f.statuses, params))
    if f.finish_reasons:
        clauses.append(_in_list("coalesce(r.finish_reason, '(none)')", f.finish_reasons, params))
    if f.models:
        clauses.append(_in_list(COLUMNS["model"], f.models, params))
    if f.prompt_versions:
        clauses.append(_in_list("r.prompt_version", f.prompt_versions, params))
    for key, value in f.metadata.items():
        clauses.append("(r.metadata ->> ?) = ?")
        params.extend([metadata_path(key), str(value)])
    for name, (low, high) in (
        ("r.prompt_tokens", f.prompt_tokens),
        ("r.completion_tokens", f.completion_tokens),
    ):
        if low is not None:
            clauses.append(f"{name} >= ?")
            params.append(int(low))
        if high is not None:
            clauses.append(f"{name} <= ?")
            params.append(int(high))
    for rule, outcome in f.checks.items():
        clauses.append(outcome_clause(rule, outcome, params))
    if f.search:
        if f.search_in not in SEARCH_FIELDS:
            raise ValueError(f"search_in must be one of {', '.join(SEARCH_FIELDS)}")
        # contains() matches the text literally (no pattern characters) and beats ILIKE 3x.
        # The stored lowercase prompt-and-answer text is read first; it is the whole test
        # for a search of both, in any case, without a line break (the texts' separator).
        lowered = f.search.lower()
        clauses.append("contains(r.search_text, ?)")
        params.append(lowered)
        if f.search_in != "both" or f.match_case or "\n" in lowered:
            names = ["prompt", "answer"] if f.search_in == "both" else [f.search_in]
            wrap = "{}" if f.match_case else "lower({})"
            found = [f"contains({wrap.format(COLUMNS[n])}, ?)" for n in names]
            clauses.append("(" + " OR ".join(found) + ")")
            params.extend([f.search if f.match_case else lowered] * len(names))
    return "WHERE " + " AND ".join(clauses), params


def sort_options(metadata_keys: list[str]) -> list[str]:
    """Every name results can be sorted by: the columns, then ``metadata.KEY`` per field."""
    return [*COLUMNS, *(METADATA_SORT + key for key in metadata_keys)]


def order_by(sort: str = "line_no", descending: bool = False) -> tuple[str, list[Any]]:
    """An ``ORDER BY`` and its parameters for one of :data:`COLUMNS` or ``metadata.KEY``
    (anything else is refused); missing values come last either way."""
    params: list[Any] = []
    if sort.startswith(METADATA_SORT) and len(sort) > len(METADATA_SORT):
        expr = "(r.metadata ->> ?)"  # the key travels as a parameter, like the filter's
        params.append(metadata_path(sort[len(METADATA_SORT) :]))
    elif sort in COLUMNS:
        expr = COLUMNS[sort]
    else:
        raise ValueError(
            f"cannot sort by {sort!r}; choose one of {', '.join(COLUMNS)} or metadata.KEY"
        )
    direction = "DESC" if descending else "ASC"
    sql = f"ORDER BY {expr} {direction} NULLS LAST, r.job_id, r.line_no, r.custom_id"
    return sql, params


def _select(preview: bool) -> str:
    cols = []
    for name, expr in COLUMNS.items():
        if preview and name in PREVIEWED:
            expr = f"left({expr}, {PREVIEW_CHARS})"
        cols.append(f"{expr} AS {name}")
    return "SELECT " + ", ".join(cols)


def page(
    store: Store,
    f: ResultFilter,
    *,
    sort: str = "line_no",
    descending: bool = False,
    limit: int = 50,
    offset: int = 0,
) -> pd.DataFrame:
    """One page of matching results, long texts cut to a preview."""
    clause, params = where(f)
    order, order_params = order_by(sort, descending)
    window = [*params, *order_params, int(limit), int(offset)]
    if offset < DEEP_PAGE:
        sql = f"{_select(True)} {FROM} {clause} {order} LIMIT ? OFFSET ?"
        return store.query(sql, window)
    # Deep pages: sort only the keys, then fetch the page's rows (1M rows: ~100 ms, not ~800).
    sql = f"""
        WITH keys AS (SELECT r.job_id, r.custom_id {FROM} {clause} {order} LIMIT ? OFFSET ?)
        {_select(True)} {FROM}
        SEMI JOIN keys k ON k.job_id = r.job_id AND k.custom_id = r.custom_id
        {order}
    """
    return store.query(sql, [*window, *order_params])


def count(store: Store, f: ResultFilter, cap: int | None = None) -> int:
    """How many results match; with ``cap``, counting stops past it (at ``cap + 1``)."""
    clause, params = where(f)
    if cap is None:
        sql = f"SELECT count(*) AS n {FROM} {clause}"
    else:  # the scan stops as soon as cap + 1 matches are found
        sql = f"SELECT count(*) AS n FROM (SELECT 1 {FROM} {clause} LIMIT ?)"
        params = [*params, int(cap) + 1]
    return int(store.query(sql, params)["n"].iloc[0])


def token_totals(store: Store, f: ResultFilter) -> pd.DataFrame:
    """Tokens of every matching result, per model: model, results, prompt_tokens,
    completion_tokens (what their cost is reckoned from)."""
    clause, params = where(f)
    return store.query(
        f"""SELECT coalesce(r.model, '') AS model, count(*) AS results,
                   coalesce(sum(r.prompt_tokens), 0) AS prompt_tokens,
                   coalesce(sum(r.completion_tokens), 0) AS completion_tokens
            {FROM} {clause} GROUP BY 1 ORDER BY 1""",
        params,
    )


@dataclass(frozen=True)
class Total:
    """How many results match: exactly ``n``, or (``exact`` False) more than ``n``."""

    n: int
    exact: bool = True

    def pages(self, size: int) -> int:
        """Pages of ``size`` rows that hold the matches (those known so far)."""
        return max(1, -(-(self.n + (0 if self.exact else 1)) // size))

    def __str__(self) -> str:
        return f"{self.n:,}" if self.exact else f"more than {self.n:,}"


def total(
    store: Store, f: ResultFilter, *, offset: int = 0, limit: int = 0, shown: int | None = None
) -> Total:
    """How many results match, as cheaply as it can be known for the page being shown.

    A page that is not full (``0 < shown < limit``, or nothing at all on the first page)
    ends the matches, so no query runs: a search for text that is absent or rare reads
    the texts once (for the page), not twice. Otherwise filters without a search are
    counted exactly (a few ms at a million rows); a search counts up to
    :data:`SEARCH_COUNT_CAP` and says "more than" past it (5 ms instead of ~300 for a
    common word); :func:`count` gives the exact figure on demand.

    Args:
        store: the store to read.
        f: the filter of the page.
        offset: the page's first row.
        limit: the page's size.
        shown: the rows the page query returned; None when no page was read.
    """
    if shown is not None and (0 < shown < limit or (shown == 0 and offset == 0)):
        return Total(offset + shown)
    if not f.search:
        return Total(count(store, f))
    n = count(store, f, cap=SEARCH_COUNT_CAP)
    return Total(n) if n <= SEARCH_COUNT_CAP else Total(SEARCH_COUNT_CAP, exact=False)


def facets(store: Store, job_ids: list[str]) -> dict[str, list[str]]:
    """The values each filter can take in these jobs (for the filter widgets); each job's
    are kept in the index while its results are unchanged (core/store/facets.py)."""
    out = jobs_facets(store, job_ids)
    out["checks"] = rule_names(store, job_ids)
    return out


def metadata_values(store: Store, job_ids: list[str], key: str, limit: int = 200) -> list[str]:
    """The distinct values of one metadata key, most common first."""
    clause, params = where(ResultFilter(job_ids=job_ids))
    frame = store.query(
        f"SELECT r.metadata ->> ? AS v, count(*) AS n {FROM} {clause} "
        "AND v IS NOT NULL GROUP BY v ORDER BY n DESC, v LIMIT ?",
        [metadata_path(key), *params, limit],
    )
    return [str(v) for v in frame["v"]]


def detail(store: Store, job_id: str, custom_id: str) -> dict[str, Any] | None:
    """Everything about one result: conversation, answer, parameters, tokens, raw line."""
    frame = store.query(
        f"""
        {_select(False)}, q.messages, q.params, r.raw, r.status_code, r.error_code,
        {SHOWN_ANSWER_SQL} AS shown_answer
        {FROM} LEFT JOIN requests q ON q.job_id = r.job_id AND q.custom_id = r.custom_id
        WHERE r.job_id = ? AND r.custom_id = ?
        """,
        [job_id, custom_id],
    )
    if frame.empty:
        return None
    row = frame.iloc[0].to_dict()
    with store.cursor() as cur:  # an embeddings line: its vectors, from the vector table
        row["raw"] = restore_vectors(cur, [job_id], [custom_id], [row["raw"]])[0]
    for name in ("messages", "params", "metadata", "raw"):
        row[name] = _json(row.get(name))
    return {k: (None if _missing(v) else v) for k, v in row.items()}


def conversation(messages: Any, prompt: str | None = None) -> list[tuple[str, str]]:
    """A request's whole conversation as ``(role, text)`` turns: chat messages (text parts
    joined), a Responses input, or else the prompt alone. ``messages`` may be JSON text."""
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except ValueError:
            messages = None
    if isinstance(messages, str):  # a Responses input given as one string
        return [("user", messages)]
    turns = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        turns.append((str(message.get("role", "")), "" if content is None else str(content)))
    return turns or ([("user", prompt)] if prompt else [])


def no_results_reason(status: JobStatus) -> str:
    """Why a job shows no result: one that ended wrote none, and none will come."""
    if status.interrupted:
        return (
            "This job's worker stopped before any request had a result. Resume (on Jobs or "
            "Monitor) runs its requests; their results appear here as the worker writes them."
        )
    if status.state == JobState.COMPLETED:
        return "This job completed without a result: its input had no request to run."
    if status.state == JobState.CANCELLED:
        return (
            "This job was cancelled before any request had a result, so it has none. "
            "Resume (on Jobs or Monitor) runs its requests."
        )
    if status.state == JobState.EXPIRED:
        return "This job's completion window ended before any request ran: it has no result."
    if status.is_final:
        return "This job failed before any request had a result; the Monitor says why."
    return "This job has no results yet. They appear here as the worker writes them."


def reused_text(raw: Any) -> str:
    """Where a reused answer came from (docs/reuse.md), from its line's ``reused_from``;
    "" for an answer the engine made for this line."""
    source = raw.get("reused_from") if isinstance(raw, dict) else None
    if not isinstance(source, dict):
        return ""
    return (
        f"Reused: this answer was made for {source.get('custom_id')} in job {source.get('job')} "
        "and given again, not computed (the same request, model and settings)."
    )


def latency_text(latency_ms: Any) -> str:
    """A result's latency for people: ``850 ms``, ``2.41 s`` or ``not recorded``."""
    if _missing(latency_ms):
        return "not recorded"  # failures, and results from before it was recorded
    ms = int(latency_ms)
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def _json(value: Any) -> Any:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


def _missing(value: Any) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False
