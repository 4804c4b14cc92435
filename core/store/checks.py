"""Reading the checks' outcomes (table ``rule_outcomes``, written by ``core.qa.grading``):
pass rates with their 95% interval, the rules of jobs, and the filter by outcome.

An outcome is passed, failed or not graded (a failed request has no answer to grade; an
``equals_metadata`` rule does not grade a request without that field). A judge job's
verdicts (``core.store.judged``) are checks too, named after the judge (``judge_<id>``):
they appear here beside the rules, after them. A pass rate is
passed / (passed + failed), with the Wilson interval of ``core.store.review``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import pandas as pd

from core.schemas import JUDGE_CHECK
from core.store.db import Store
from core.store.judged import check_names as judge_names
from core.store.judged import verdicts_sql
from core.store.review import wilson

# contradicted: a judge's verdict against its own score (core.store.judged); rules never.
Outcome = Literal["passed", "failed", "not_graded", "contradicted"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
FAILED_FIRST = ("failed", "passed", "not_graded", "contradicted")  # what one looks for first
_IS = {
    "passed": "{v}",
    "failed": "NOT {v}",
    "not_graded": "{v} IS NULL AND NOT {c}",
    "contradicted": "{c}",
}
GROUPS: dict[str, str] = {
    "all": "'all'",
    "job": "o.job_id",
    "model": "coalesce(o.model, '(none)')",
    "prompt_version": "coalesce(o.prompt_version, '(none)')",
}
# A result's outcome of the rule named by a parameter: its place in the job's rules.
_OF_RULE = "o.passed[list_position(u.names, ?)]"
JUDGE_PLACE = 1_000_000  # judges sort after every rule


def outcome_clause(rule: str, outcome: str, params: list[Any]) -> str:
    """A condition on ``results r``: the result's outcome of ``rule`` is ``outcome`` (a job
    not graded by that rule has no outcome of it: none of its results match)."""
    if outcome not in _IS:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}")
    if re.fullmatch(JUDGE_CHECK, rule):  # a judge's verdicts (no rule is named so)
        params.append(rule)
        return (
            f"EXISTS (SELECT 1 FROM ({verdicts_sql('l.check_name = ?')}) jv "
            "WHERE jv.job_id = r.job_id AND jv.custom_id = r.custom_id "
            f"AND {_IS[outcome].format(v='jv.passed', c='jv.contradicts')})"
        )
    params.extend([rule, rule])
    return (
        "EXISTS (SELECT 1 FROM rule_outcomes o JOIN rule_runs u ON u.job_id = o.job_id "
        "WHERE o.job_id = r.job_id AND o.custom_id = r.custom_id "
        f"AND list_contains(u.names, ?) AND {_IS[outcome].format(v=_OF_RULE, c='false')})"
    )


def one_check_sql(check: str, job_ids: list[str], params: list[Any]) -> str:
    """A query of one check's outcomes on these jobs' results (a rule's or a judge's):
    job_id, custom_id, passed (None: not graded); its parameters are appended."""
    params.extend([check, list(job_ids), check, check, list(job_ids)])
    return f"""
        SELECT o.job_id, o.custom_id, {_OF_RULE} AS passed
        FROM rule_outcomes o JOIN rule_runs u ON u.job_id = o.job_id
        WHERE list_contains(?, o.job_id) AND list_contains(u.names, ?)
        UNION ALL
        SELECT jv.job_id, jv.custom_id, jv.passed FROM ({verdicts_sql("l.check_name = ?")}) jv
        WHERE list_contains(?, jv.job_id)
    """


def rule_names(store: Store, job_ids: list[str]) -> list[str]:
    """The rules these jobs were graded with, in their files' order."""
    frame = store.query(
        """
        SELECT rule FROM (
            SELECT unnest(names) AS rule, unnest(range(len(names))) AS place
            FROM rule_runs WHERE list_contains(?, job_id)
        ) GROUP BY rule ORDER BY min(place), rule
        """,
        [list(job_ids)],
    )
    names = [str(name) for name in frame["rule"]]
    return names + [n for n in judge_names(store, job_ids) if n not in names]


def pass_rates(store: Store, job_ids: list[str], by: str = "job") -> pd.DataFrame:
    """Per rule and group (``all``, ``job``, ``model`` or ``prompt_version``): passed,
    failed, not_graded, contradicted (a judge's verdicts against their own score, in
    neither passed nor failed), pass_rate (None when nothing was graded), ci_low and
    ci_high."""
    if by not in GROUPS:
        raise ValueError(f"group by one of {', '.join(GROUPS)}")
    frame = store.query(
        f"""
        SELECT rule, "{by}",
               count(*) FILTER (WHERE passed) AS passed,
               count(*) FILTER (WHERE NOT passed) AS failed,
               count(*) FILTER (WHERE passed IS NULL AND NOT contradicts) AS not_graded,
               count(*) FILTER (WHERE contradicts) AS contradicted,
               min(place) AS place
        FROM (
            SELECT {GROUPS[by]} AS "{by}", unnest(u.names) AS rule,
                   unnest(range(len(u.names))) AS place, unnest(o.passed) AS passed,
                   false AS contradicts
            FROM rule_outcomes o JOIN rule_runs u ON u.job_id = o.job_id
            WHERE list_contains(?, o.job_id)
            UNION ALL  -- judges' verdicts, after the rules
            SELECT {GROUPS[by]}, o.rule, {JUDGE_PLACE}, o.passed, o.contradicts
            FROM ({verdicts_sql()}) o
        )
        GROUP BY ALL ORDER BY place, rule, 2
        """,
        [list(job_ids), list(job_ids)],
    )
    graded = frame["passed"] + frame["failed"]
    bounds = [wilson(int(p), int(n)) for p, n in zip(frame["passed"], graded, strict=True)]
    frame["pass_rate"] = [
        p / n if n else None for p, n in zip(frame["passed"], graded, strict=True)
    ]
    frame["ci_low"] = [b[0] if n else None for b, n in zip(bounds, graded, strict=True)]
    frame["ci_high"] = [b[1] if n else None for b, n in zip(bounds, graded, strict=True)]
    for name in ("passed", "failed", "not_graded", "contradicted"):
        frame[name] = frame[name].astype(int)
    return frame.drop(columns=["place"])


@dataclass
class ExportChecks:
    """What an export of results adds for the checks of its jobs (all empty without any).

    Attributes:
        columns: select list, one column per rule: ``check_<rule>`` true, false, or empty
            where not graded.
        as_json: an expression of the outcomes as one JSON object (JSONL's ``checks``).
        join: the LEFT JOINs (aliases ``o`` and ``u``) that bring them to ``results r``.
        params: the select list's parameters (they come before the query's others).
    """

    columns: str = ""
    as_json: str = ""
    join: str = ""
    params: list[Any] = field(default_factory=list)


def export_checks(store: Store, job_ids: list[str]) -> ExportChecks:
    """The columns and joins that add these jobs' outcomes to an export of their results;
    a judge adds its verdict's score and reason too (``<judge>_score``, ``<judge>_reason``)."""
    names = rule_names(store, job_ids)
    if not names:
        return ExportChecks()
    judges = set(judge_names(store, job_ids))
    # Names are letters, digits and _ . - (the rules' own constraint; a judge's is
    # judge_<hex>): safe between quotes.
    columns, pairs, params, joins = [], [], [], []
    for k, name in enumerate(names):
        if name in judges:
            value = f"j{k}.passed"
            columns += [
                f'{value} AS "check_{name}"',
                f'j{k}.score AS "{name}_score"',
                f'j{k}.reason AS "{name}_reason"',
            ]
        else:
            value = _OF_RULE
            columns.append(f'{value} AS "check_{name}"')
            params.append(name)
        pairs.append(f"'{name}', {value}")
    for k, name in enumerate(names):
        if name in judges:
            joins.append(
                f"LEFT JOIN ({verdicts_sql('l.check_name = ?')}) j{k} "
                f"ON j{k}.job_id = r.job_id AND j{k}.custom_id = r.custom_id"
            )
            params.append(name)
    join = (
        "LEFT JOIN rule_outcomes o ON o.job_id = r.job_id AND o.custom_id = r.custom_id "
        "LEFT JOIN rule_runs u ON u.job_id = r.job_id " + " ".join(joins)
    )
    return ExportChecks(", ".join(columns), f"json_object({', '.join(pairs)})", join, params)
