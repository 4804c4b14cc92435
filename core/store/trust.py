"""Trust in a check: how often people and a rule or judge agree on the same results.

Where reviewers labelled results (``pass`` / ``fail`` on Review) that a check also graded,
the two are compared label by label: a confusion matrix (people's verdicts by the check's),
accuracy (the share where they agree), and Cohen's kappa (agreement beyond chance, with
``core.store.review.cohen_kappa``), plus the items where they disagree, to be read or
reviewed again. ``unsure`` labels and results the check did not grade are left out, and
counted. An analyst decides from this whether a judge can grade the results nobody read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from core.store.checks import one_check_sql
from core.store.db import Store
from core.store.results import ResultFilter
from core.store.review import cohen_kappa
from core.store.samples import MAX_SIZE, Sample, SampleDefinition, save_items

SIDES = ("pass", "fail")


@dataclass
class CheckAgreement:
    """People's labels against one check's outcomes, over the labels both made.

    Attributes:
        items: labels compared (one per result and reviewer).
        agreed: of them, where the label equals the check's outcome.
        kappa: Cohen's kappa (None without items).
        matrix: rows ``person: pass/fail``, columns ``check: pass/fail``, counts.
        disagreements: job_id, custom_id, reviewer, person, check, answer.
        unsure: ``unsure`` labels of results the check graded (left out).
        not_graded: pass/fail labels of results the check did not grade (left out).
    """

    items: int
    agreed: int
    kappa: float | None
    matrix: pd.DataFrame
    disagreements: pd.DataFrame
    unsure: int
    not_graded: int

    @property
    def accuracy(self) -> float | None:
        return self.agreed / self.items if self.items else None


def confusion(people: list[str], check: list[str]) -> pd.DataFrame:
    """The 2×2 count of people's verdicts (rows) by the check's (columns), pass first."""
    matrix = pd.DataFrame(
        0, index=[f"person: {s}" for s in SIDES], columns=[f"check: {s}" for s in SIDES]
    )
    for person, outcome in zip(people, check, strict=True):
        matrix.loc[f"person: {person}", f"check: {outcome}"] += 1
    return matrix


def check_agreement(
    store: Store, job_ids: list[str], check: str, reviewer: str | None = None
) -> CheckAgreement:
    """How people's labels (one reviewer's, or everyone's) and ``check`` agree on these
    jobs' results."""
    params: list[Any] = []
    outcomes = one_check_sql(check, job_ids, params)
    params.append(list(job_ids))
    who = ""
    if reviewer:
        who = "AND v.reviewer = ?"
        params.append(reviewer)
    frame = store.query(
        f"""
        SELECT v.job_id, v.custom_id, v.reviewer, v.verdict AS person,
               CASE WHEN c.passed THEN 'pass' WHEN NOT c.passed THEN 'fail' END AS "check",
               r.answer
        FROM reviews v
        JOIN ({outcomes}) c ON c.job_id = v.job_id AND c.custom_id = v.custom_id
        LEFT JOIN results r ON r.job_id = v.job_id AND r.custom_id = v.custom_id
        WHERE list_contains(?, v.job_id) {who}
        ORDER BY v.job_id, v.custom_id, v.reviewer
        """,
        params,
    )
    decided = frame["person"].isin(SIDES)
    unsure = int((~decided & frame["check"].notna()).sum())
    not_graded = int((decided & frame["check"].isna()).sum())
    both = frame[decided & frame["check"].notna()].reset_index(drop=True)
    people, outcomes_of = list(both["person"]), list(both["check"])
    agree = both["person"] == both["check"]
    return CheckAgreement(
        items=len(both),
        agreed=int(agree.sum()),
        kappa=cohen_kappa(people, outcomes_of),
        matrix=confusion(people, outcomes_of),
        disagreements=both[~agree].reset_index(drop=True),
        unsure=unsure,
        not_graded=not_graded,
    )


def review_disagreements(
    store: Store,
    job_ids: list[str],
    check: str,
    agreement: CheckAgreement,
    owner: str | None = None,
) -> Sample:
    """A review sample of the results where people and ``check`` disagree (each result
    once, in order; at most :data:`MAX_SIZE`), owned by ``owner`` (core.human.owners)."""
    items = agreement.disagreements.drop_duplicates(["job_id", "custom_id"]).head(MAX_SIZE)
    items = items.assign(stratum="person " + items["person"] + ", check " + items["check"])
    definition = SampleDefinition(
        filter=ResultFilter(job_ids=list(job_ids)), method="random", size=max(len(items), 1)
    )
    return save_items(store, f"{check}: people disagree", definition, items, owner)
