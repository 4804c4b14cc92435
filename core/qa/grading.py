"""Grading: every result of some jobs against a rule set, inside DuckDB, into
``rule_outcomes``; and the rules saved in each job's folder so a rerun grades alike.

The job folder is the truth here too: ``rules.yaml`` beside the job's results holds the
rules it was last graded with, and the outcomes in DuckDB are rebuilt from it whenever they
are missing (a deleted database) or stale (other rules, or results that changed since).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from core.files import odd_entry, write_atomic
from core.qa.evaluate import Item, python_outcome, python_rows, sql_expression
from core.qa.rules import FILE_NAME, MAX_RULES_BYTES, RulesError, RuleSet, load_rules
from core.schemas import COMPLETED_WITH_ERRORS, FINAL_STATES
from core.store.db import Store
from core.store.schema import CALLS_SHAPE

log = logging.getLogger(__name__)

PY_BATCH = 50_000  # rows a Python-graded rule reads at a time
RUNNING_REGRADE_SECONDS = 30.0  # a running job's outcomes are brought up to date this often
# What a page waits for a grading it started before it draws the last outcomes and says
# "grading…": a small job is graded by then, a million results take seconds.
BACKGROUND_WAIT_SECONDS = 0.2
# Jobs whose results no longer change by themselves (an interrupted one waits for a resume)
FINAL = {s.value for s in FINAL_STATES} | {COMPLETED_WITH_ERRORS, "interrupted"}

# A result's answer as the rules read it: never NULL (a success without text is "").
_RESULTS = "(SELECT *, coalesce(answer, '') AS a FROM results WHERE list_contains(?, job_id)) r"
# Each tool call's arguments (NULL where the answer is text), for json_schema rules.
_ARGUMENTS = (
    "CASE WHEN r.tool_calls IS NOT NULL THEN list_transform(json_transform("
    f"r.raw -> '$.response.body.choices[0].message.tool_calls', '{CALLS_SHAPE}'), "
    "lambda c: c.function.arguments) END"
)


def _python_outcomes(cur: Any, job_ids: list[str], rule: Any, rows: str) -> pa.Table:
    """The outcomes of the rows that ``rows`` picks, graded in Python, as a table."""
    reader = cur.execute(
        f"SELECT r.job_id, r.custom_id, r.a, {_ARGUMENTS} FROM {_RESULTS} "
        f"WHERE r.status = 'succeeded' AND {rows}",
        [job_ids],
    ).to_arrow_reader(PY_BATCH)
    keys: dict[str, list] = {"job_id": [], "custom_id": [], "passed": []}
    for batch in reader:
        columns = (c.to_pylist() for c in batch.columns)
        for job_id, custom_id, answer, arguments in zip(*columns, strict=True):
            keys["job_id"].append(job_id)
            keys["custom_id"].append(custom_id)
            item = Item(answer=answer, arguments=arguments)
            keys["passed"].append(python_outcome(rule, item))
    return pa.table(
        keys,
        schema=pa.schema(
            [
                ("job_id", pa.string()),
                ("custom_id", pa.string()),
                ("passed", pa.bool_()),
            ]
        ),
    )


def grade(store: Store, job_ids: Iterable[str], rules: RuleSet) -> None:
    """Grades every result of these jobs by every rule, replacing their outcomes."""
    job_ids = list(job_ids)
    if not job_ids:
        return
    with store.writing("checks") as cur:  # one grading at a time; labels and reads go on
        exprs, joins, params, registered = [], [], [], []
        try:
            for k, rule in enumerate(rules.rules):
                expr = sql_expression(rule, params)
                rows = python_rows(rule)
                if rows is not None:  # those rows are graded in Python, the rest by SQL
                    cur.register(f"py{k}", _python_outcomes(cur, job_ids, rule, rows))
                    registered.append(f"py{k}")
                    joins.append(
                        f"LEFT JOIN py{k} ON py{k}.job_id = r.job_id "
                        f"AND py{k}.custom_id = r.custom_id"
                    )
                    expr = f"coalesce(py{k}.passed, {expr})"
                exprs.append(f"CASE WHEN r.status = 'succeeded' THEN {expr} END AS c{k}")
            outcomes = ", ".join(f"c{k}" for k in range(len(rules.rules)))
            cur.execute("BEGIN")
            cur.execute("DELETE FROM rule_outcomes WHERE list_contains(?, job_id)", [job_ids])
            # One scan of the results; one row per result, its outcomes in the rules' order.
            cur.execute(
                f"""
                INSERT INTO rule_outcomes (job_id, custom_id, passed, model, prompt_version)
                SELECT job_id, custom_id, [{outcomes}], model, prompt_version
                FROM (
                    SELECT r.job_id, r.custom_id, r.model, r.prompt_version, {", ".join(exprs)}
                    FROM {_RESULTS} {" ".join(joins)}
                )
                """,
                [*params, job_ids],
            )
            cur.execute(
                """
                INSERT OR REPLACE INTO rule_runs
                SELECT j.job_id, ?, ?, ?, count(r.custom_id),
                       count(r.custom_id) FILTER (WHERE r.status = 'succeeded'), now(),
                       any_value(s.output_offset + coalesce(s.errors_offset, 0))
                FROM (SELECT unnest(?::VARCHAR[]) AS job_id) j
                LEFT JOIN results r ON r.job_id = j.job_id
                LEFT JOIN ingest_state s ON s.job_id = j.job_id
                GROUP BY j.job_id
                """,
                [rules.digest(), rules.model_dump_json(by_alias=True), rules.names, job_ids],
            )
            cur.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):  # no transaction was open yet
                cur.execute("ROLLBACK")
            raise
        finally:
            for name in registered:
                cur.unregister(name)


# -- the rules saved with each job ----------------------------------------------------------


def rules_file(folder: str | Path) -> Path:
    return Path(folder) / FILE_NAME


def save_rules(folder: str | Path, rules: RuleSet, text: str | None = None) -> Path:
    """Writes the rules into a job folder (atomically): the file as given when it is YAML
    (its comments kept), else the rules as YAML."""
    keep = text is not None and not text.lstrip().startswith(("{", "["))
    path = rules_file(folder)
    write_atomic(path, text if keep else rules.to_yaml())
    return path


def saved_rules_text(folder: str | Path) -> str | None:
    """The rules file saved in a job folder, or None: there is none, or it is no regular
    file (:func:`refresh` names it). At most one character past the size limit is read:
    :func:`load_rules` refuses it then."""
    path = rules_file(folder)
    if odd_entry(path) is not None or not path.exists():
        return None
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.read(MAX_RULES_BYTES + 1)


def job_folders(store: Store, job_ids: Iterable[str]) -> dict[str, Path]:
    """Each indexed job's folder, by job id."""
    frame = store.query(
        "SELECT job_id, folder FROM jobs WHERE list_contains(?, job_id)", [list(job_ids)]
    )
    return {str(j): Path(f) for j, f in zip(frame["job_id"], frame["folder"], strict=True)}


def grade_jobs(store: Store, job_ids: list[str], rules: RuleSet, text: str | None = None) -> None:
    """Saves the rules into each job's folder (the truth), then grades the jobs."""
    for folder in job_folders(store, job_ids).values():
        save_rules(folder, rules, text)
    grade(store, job_ids, rules)


@functools.lru_cache(maxsize=64)
def _parsed(text: str) -> RuleSet:
    """A saved rules file's rules, parsed once per text (pages look at them on each rerun)."""
    return load_rules(text)


def _stale(
    store: Store, job_ids: list[str]
) -> tuple[dict[str, str], list[tuple[RuleSet, list[str]]]]:
    """Which of these jobs' outcomes are missing or stale, grouped by their saved rules
    (a running job's at most every :data:`RUNNING_REGRADE_SECONDS`); and job id -> problem
    for saved rules that no longer load."""
    # Small tables only: a page calls this on every rerun, and nothing here is read in
    # proportion to a job's size (ingest's offsets say whether results came since).
    runs = store.query(
        """
        SELECT j.job_id, j.state, u.rules_digest,
               epoch(now()) - epoch(u.graded_at) AS age,
               u.ingested_bytes IS NOT DISTINCT FROM
                   s.output_offset + coalesce(s.errors_offset, 0) AS same_results
        FROM jobs j LEFT JOIN rule_runs u ON u.job_id = j.job_id
        LEFT JOIN ingest_state s ON s.job_id = j.job_id
        WHERE list_contains(?, j.job_id)
        """,
        [job_ids],
    )
    folders = job_folders(store, job_ids)
    problems: dict[str, str] = {}
    stale: dict[str, tuple[RuleSet, list[str]]] = {}
    for run in runs.itertuples(index=False):
        odd = odd_entry(rules_file(folders[run.job_id]))
        if odd is not None:
            problems[run.job_id] = f"{FILE_NAME}: {odd}"
            continue
        text = saved_rules_text(folders[run.job_id])
        if text is None:
            continue
        try:
            rules = _parsed(text)
        except RulesError as exc:
            problems[run.job_id] = f"{FILE_NAME}: {exc}"
            continue
        same = run.rules_digest == rules.digest()
        current = same and bool(run.same_results)
        if current:
            continue
        running = run.state not in FINAL
        if same and running and run.age is not None and run.age < RUNNING_REGRADE_SECONDS:
            continue
        stale.setdefault(rules.digest(), (rules, []))[1].append(run.job_id)
    return problems, list(stale.values())


def refresh(store: Store, job_ids: Iterable[str]) -> dict[str, str]:
    """Grades again, from its saved rules, each of these jobs whose outcomes are missing or
    stale (other rules, or results that changed since), and returns when it is done (the
    command line); a running job at most every :data:`RUNNING_REGRADE_SECONDS`. Returns job
    id -> problem for saved rules that no longer load (the job keeps its last outcomes)."""
    job_ids = list(job_ids)
    if not job_ids:
        return {}
    problems, stale = _stale(store, job_ids)
    for rules, jobs in stale:
        grade(store, jobs, rules)
    return problems


@dataclass
class Refreshing:
    """What :func:`refresh_in_background` found: saved rules that no longer load (job id ->
    problem), and the jobs being graded in the background now (their last outcomes, if
    any, are what the pages show meanwhile)."""

    problems: dict[str, str] = field(default_factory=dict)
    grading: list[str] = field(default_factory=list)


_busy_lock = threading.Lock()
_busy: dict[int, set[str]] = {}  # id(store) -> jobs its grading thread has still to grade


def grading_now(store: Store, job_ids: Iterable[str]) -> list[str]:
    """Those of these jobs that a background grading of this store has still to finish."""
    with _busy_lock:
        busy = _busy.get(id(store), set())
        return [j for j in job_ids if j in busy]


def refresh_in_background(
    store: Store, job_ids: Iterable[str], wait: float = BACKGROUND_WAIT_SECONDS
) -> Refreshing:
    """:func:`refresh` on a thread of its own, so a page never grades a million results
    while it draws: waits up to ``wait`` seconds (a small job is graded by then, and the
    page shows its fresh outcomes), then returns what is still being graded. A job already
    being graded is not graded twice; the thread's end moves :meth:`Store.data_version` on
    (``rule_runs``), so the next rerun recomputes what read the outcomes."""
    job_ids = list(job_ids)
    if not job_ids:
        return Refreshing()
    problems, stale = _stale(store, job_ids)
    with _busy_lock:
        busy = _busy.setdefault(id(store), set())
        todo = [(r, [j for j in jobs if j not in busy]) for r, jobs in stale]
        todo = [(r, jobs) for r, jobs in todo if jobs]
        for _, jobs in todo:
            busy.update(jobs)
    if todo:
        thread = threading.Thread(
            target=_grade_in_background, args=(store, todo), name="grading", daemon=True
        )
        thread.start()
        thread.join(wait)
    return Refreshing(problems, grading_now(store, job_ids))


def _grade_in_background(store: Store, todo: list[tuple[RuleSet, list[str]]]) -> None:
    for rules, jobs in todo:
        try:
            grade(store, jobs, rules)
        except Exception:  # the store closed, or the database failed: graded on a later rerun
            log.warning("grading of %s in the background failed", ", ".join(jobs), exc_info=True)
        finally:
            with _busy_lock:
                _busy.get(id(store), set()).difference_update(jobs)


def timed_grade_jobs(
    store: Store, job_ids: list[str], rules: RuleSet, text: str | None = None
) -> float:
    """:func:`grade_jobs`, returning the seconds it took (the page says so)."""
    start = time.perf_counter()
    grade_jobs(store, job_ids, rules, text)
    return time.perf_counter() - start
