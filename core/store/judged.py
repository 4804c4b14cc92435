"""Judge verdicts, read back from judge jobs' own results (made by ``core.qa.judge``).

A judge job is a batch job like any other; its ``job.json`` names the job(s) it grades
(``judge_links``, filled at ingest). Each of its lines has the graded result's
``custom_id``, so its answers join back to the graded results here, in SQL, every time
they are read: a verdict that arrives is counted at once, and nothing can go stale.

A verdict answer is a JSON object; a result is graded when its ``verdict`` is ``"pass"``
or ``"fail"`` (its ``score`` and ``reason`` are kept beside). Any other answer, and a
failed judge request, leaves the result *not graded*, counted apart; so does a verdict that
contradicts its own score (a pass scored 1 or 2, a fail scored 4 or 5), flagged as
*contradicted*. A pairwise judge's
answer names ``winner`` ``"1"``, ``"2"`` or ``"tie"``; the line's ``metadata.swapped``
says whether answer 1 was side B, so the winner maps back to A or B.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from core.json_strict import LENIENT_JSON
from core.store.db import Store
from core.store.review import wilson
from core.store.schema import natural_sql

# DuckDB's JSON takes NaN and trailing commas, and reads the first of two equal keys; a
# verdict is strict JSON, its keys each named once (nested objects are not looked into).
_STRICT = (
    f"NOT regexp_matches(r.answer, '{LENIENT_JSON}') "
    "AND len(json_keys(r.answer)) = len(list_distinct(json_keys(r.answer)))"
)
# The answer as a JSON object, or NULL: try() turns malformed JSON into NULL, never an error.
_OBJECT = (
    "CASE WHEN r.status = 'succeeded' AND try(json_type(r.answer)) = 'OBJECT' "
    f"AND try({_STRICT}) THEN r.answer END"
)


def _field(name: str) -> str:
    return f"try(json_extract_string({_OBJECT}, '$.{name}'))"


# A verdict that contradicts its own score (1 useless .. 5 perfect) is not believed: a pass
# scored this low or below, or a fail scored this high or above, is flagged and counted
# apart from passes, failures and answers that are no verdict.
PASS_SCORE_AT_MOST_CONTRADICTS = 2
FAIL_SCORE_AT_LEAST_CONTRADICTS = 4
_VERDICT = _field("verdict")
_SCORE = f"try(CAST(json_extract({_OBJECT}, '$.score') AS DOUBLE))"
_CONTRADICTS = (
    f"coalesce(({_VERDICT} = 'pass' AND {_SCORE} <= {PASS_SCORE_AT_MOST_CONTRADICTS}) "
    f"OR ({_VERDICT} = 'fail' AND {_SCORE} >= {FAIL_SCORE_AT_LEAST_CONTRADICTS}), false)"
)


def verdicts_sql(where: str = "list_contains(?, l.graded[1])") -> str:
    """One row per verdict line of the verdict judges that ``where`` (a condition on
    ``judge_links l``, e.g. of the jobs given as its one parameter) picks: job_id and
    custom_id of the graded result, rule (the judge's check name), judge_job, passed (None:
    not graded, or contradicted), contradicts (the verdict contradicts its score), score,
    reason (a failed judge request's error: why it is not graded), and the graded result's
    model and prompt_version."""
    return f"""
SELECT l.graded[1] AS job_id, r.custom_id, l.check_name AS rule, l.judge_job,
       CASE WHEN {_VERDICT} IN ('pass', 'fail') AND NOT {_CONTRADICTS}
            THEN {_VERDICT} = 'pass' END AS passed,
       {_CONTRADICTS} AS contradicts,
       {_SCORE} AS score,
       CASE WHEN r.status = 'succeeded' THEN {_field("reason")} ELSE r.error_message END
           AS reason,
       g.model, g.prompt_version
FROM judge_links l
JOIN results r ON r.job_id = l.judge_job
JOIN results g ON g.job_id = l.graded[1] AND g.custom_id = r.custom_id
WHERE l.kind = 'verdict' AND {where}
"""


_WINNER = _field("winner")
_SWAPPED = "coalesce(try(r.metadata ->> '$.swapped') = 'true', false)"
# A pairwise line's winner as the side it names: "1"/"2" undone from the line's swap.
PAIRWISE_SQL = f"""
SELECT r.custom_id AS key,
       CASE {_WINNER}
           WHEN 'tie' THEN 'tie'
           WHEN '1' THEN CASE WHEN {_SWAPPED} THEN 'B' ELSE 'A' END
           WHEN '2' THEN CASE WHEN {_SWAPPED} THEN 'A' ELSE 'B' END
       END AS choice,
       {_SWAPPED} AS swapped, {_WINNER} AS winner, {_field("reason")} AS reason,
       r.status
FROM results r WHERE r.job_id = ?
"""


def judge_jobs(store: Store) -> set[str]:
    """The ids of every judge job (a job whose lines grade other jobs' results)."""
    return set(store.query("SELECT judge_job FROM judge_links")["judge_job"])


def judges(store: Store, job_ids: list[str], kind: str = "verdict") -> pd.DataFrame:
    """The judge jobs of ``kind`` grading any of these jobs (``pairwise``: both of them, in
    either order), oldest first: judge_job, check_name, graded, name, state."""
    if kind == "pairwise":
        where = "len(l.graded) = 2 AND list_has_all(?, l.graded)"
    else:
        where = "list_contains(?, l.graded[1])"
    return store.query(
        f"""
        SELECT l.judge_job, l.check_name, l.graded, coalesce(j.name, '') AS name, j.state,
               j.total, j.succeeded + j.failed AS done,
               l.split, l.split_values, l.pair_on
        FROM judge_links l JOIN jobs j ON j.job_id = l.judge_job
        WHERE l.kind = ? AND {where}
        ORDER BY j.created_at, l.judge_job
        """,
        [kind, list(job_ids)],
    )


def check_names(store: Store, job_ids: list[str]) -> list[str]:
    """The names the verdict judges of these jobs take among their checks."""
    return [str(n) for n in judges(store, job_ids)["check_name"]]


def verdicts(store: Store, job_ids: list[str], check: str | None = None) -> pd.DataFrame:
    """Every verdict on these jobs' results (of one judge, when given): job_id, custom_id,
    rule, judge_job, passed (None: not graded), score, reason, model, prompt_version."""
    sql = f"SELECT * FROM ({verdicts_sql()}) v"
    params: list[Any] = [list(job_ids)]
    if check is not None:
        sql += " WHERE v.rule = ?"
        params.append(check)
    return store.query(sql + " ORDER BY v.job_id, v.custom_id", params)


@dataclass
class PairwiseTally:
    """A pairwise judge's verdicts mapped back to the sides: counts, each share of the
    decided pairs (A + B + tie) with its 95% Wilson interval, and what it could not read."""

    a: int
    b: int
    tie: int
    not_graded: int
    swapped: int
    lines: int

    @property
    def decided(self) -> int:
        return self.a + self.b + self.tie

    def share(self, choice: str) -> tuple[float | None, float, float]:
        """(share, low, high) of ``A``, ``B`` or ``tie`` among the decided pairs."""
        n = {"A": self.a, "B": self.b, "tie": self.tie}[choice]
        low, high = wilson(n, self.decided)
        return (n / self.decided if self.decided else None), low, high

    def flipped(self) -> PairwiseTally:
        """The same verdicts with A and B exchanged: the tally of a comparison of B and A."""
        return replace(self, a=self.b, b=self.a)


def pairwise_verdicts(store: Store, judge_job: str) -> pd.DataFrame:
    """A pairwise judge's lines: key (the pair's key: its line's custom_id), choice (A, B, tie
    or None), swapped, winner (as the judge wrote it), reason, status; in the pairs' order."""
    order = natural_sql("key")
    return store.query(f"SELECT * FROM ({PAIRWISE_SQL}) ORDER BY {order}", [judge_job])


def pairwise_tally(store: Store, judge_job: str) -> PairwiseTally:
    frame = pairwise_verdicts(store, judge_job)
    counts = frame["choice"].value_counts(dropna=True).to_dict()
    return PairwiseTally(
        a=int(counts.get("A", 0)),
        b=int(counts.get("B", 0)),
        tie=int(counts.get("tie", 0)),
        not_graded=int(frame["choice"].isna().sum()),
        swapped=int(frame["swapped"].sum()),
        lines=len(frame),
    )
