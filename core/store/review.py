"""Reviewer labels on results: verdicts, scores, tags, comments, corrected answers.

Each label is appended to ``labels.jsonl`` in the data folder (``core.human.files``) before
DuckDB indexes it (``reviews``: the latest per result and reviewer; ``review_history``:
every one), so a deleted or broken database loses none; labels go out with every export.
Pass rates come with a Wilson score interval; Cohen's kappa compares two raters over the
items both labelled (a judge against people: ``core.store.trust``). Agreement over many
reviewers is Krippendorff's alpha (``core.store.agreement``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from core.human import queues as qu
from core.human.files import VERDICTS, LabelRecord, append, now_utc
from core.human.label_schemas import schema_of
from core.human.label_sets import own_labels
from core.human.questions import Answer, SchemaError, text_problem
from core.store.db import Store

__all__ = ["VERDICTS"]  # the verdicts every reviewer has (each may add labels of their own)


class ReviewError(ValueError):
    """A label that cannot be saved; the message says why."""


@dataclass
class Label:
    """One reviewer's judgement of one result."""

    verdict: str
    score: int | None = None
    tags: tuple[str, ...] = ()
    comment: str = ""
    corrected_answer: str = ""
    answers: dict[str, Answer] = field(default_factory=dict)  # the sample's schema's, by title


def parse_tags(text: str) -> tuple[str, ...]:
    """Comma-separated tags, trimmed, without blanks or repeats, in the order given."""
    seen: dict[str, None] = {}
    for tag in text.split(","):
        if tag.strip():
            seen.setdefault(tag.strip(), None)
    return tuple(seen)


def save_label(
    store: Store,
    job_id: str,
    custom_id: str,
    reviewer: str,
    label: Label,
    sample_id: str | None = None,
) -> None:
    """Saves (or replaces) a reviewer's label for a result: in its file, then the index."""
    record_label(store, job_id, custom_id, reviewer, label, sample_id)
    store.sync_human()


def record_label(
    store: Store,
    job_id: str,
    custom_id: str,
    reviewer: str,
    label: Label,
    sample_id: str | None = None,
    *,
    durable: bool = True,
) -> None:
    """Saves a label in its file only (the file is the truth); the index has it at the
    next :meth:`Store.sync_human` (every page run's ingest makes one) or after
    :func:`index_in_background`. Review's keys save this way with ``durable`` False and
    show the next item before the disk's flush and the index's write and commit: the line
    is in the file at once (a crash of the app keeps it) and on disk within the index
    pass's quarter second (the sync fsyncs a file before it indexes its lines), so a
    reviewer never waits on a flush queued behind a job's or an export's writes.

    Raises:
        ReviewError: no reviewer, a verdict that is not one of the reviewer's, a score
            out of 1-5, a corrected answer or comment over 1 MB, or answers that are not
            the sample's schema's (naming the question); nothing is written then.
    """
    reviewer = reviewer.strip()
    if not reviewer:
        raise ReviewError("enter your reviewer name first")
    if label.verdict not in VERDICTS:  # the reviewer's own labels are read only then
        allowed = (*VERDICTS, *own_labels(store.human_dir, reviewer))
        if label.verdict not in allowed:
            raise ReviewError(f"verdict must be one of {', '.join(allowed)}")
    if label.score is not None and not 1 <= int(label.score) <= 5:
        raise ReviewError("score must be between 1 and 5")
    for what, text in (
        ("the corrected answer", label.corrected_answer),
        ("the comment", label.comment),
    ):
        problem = text_problem(what, text)
        if problem:
            raise ReviewError(problem)
    answers: dict[str, Answer] = {}
    if any(v not in (None, "", []) for v in label.answers.values()):  # read the schema only then
        try:
            answers = schema_of(store.human_dir, sample_id).check_answers(label.answers)
        except SchemaError as exc:
            raise ReviewError(str(exc)) from None
    record = LabelRecord(
        job_id=job_id,
        custom_id=custom_id,
        reviewer=reviewer,
        verdict=label.verdict,
        score=None if label.score is None else int(label.score),
        tags=list(label.tags),
        comment=label.comment.strip() or None,
        corrected_answer=label.corrected_answer.strip() or None,
        sample_id=sample_id,
        answers=answers,
        at=now_utc(),
    )
    append(store.human_dir, record, durable=durable)  # the file first: the index is rebuilt from it


def index_in_background(store: Store) -> int:
    """Asks the store's indexing thread for the labels saved so far (``Store.human_sync``):
    one pass, a quarter second after the first ask, indexes every label saved meanwhile
    (eight reviewers' saves in that while cost one sync, not eight), and Review's next key
    never waits for the index's write and commit. Returns the ask's ticket, for
    :func:`wait_indexed`."""
    return store.human_sync.soon()


def wait_indexed(store: Store, ticket: int | None = None, timeout: float = 10.0) -> bool:
    """Waits until the labels saved before the ask of ``ticket`` (default: the last ask)
    are in the index, so a read shows them; False when that pass failed or timed out (the
    labels wait in their file for the next sync)."""
    return store.human_sync.wait(ticket, timeout)


def label_history(store: Store, job_id: str, custom_id: str) -> pd.DataFrame:
    """Every label saved for a result and every adjudication of its final label (an owner's,
    ``core.store.agreement``), oldest first: who gave which verdict, and when."""
    return store.query(
        """
        SELECT * EXCLUDE (line_no) FROM (
            SELECT 'label' AS kind, reviewer, verdict, score,
                   array_to_string(tags, ', ') AS tags, comment, corrected_answer, saved_at,
                   line_no
            FROM review_history WHERE job_id = ? AND custom_id = ?
            UNION ALL BY NAME
            SELECT 'final label' AS kind, adjudicator AS reviewer, verdict, note AS comment,
                   saved_at, line_no
            FROM adjudications WHERE job_id = ? AND custom_id = ?
        ) ORDER BY saved_at, kind DESC, line_no
        """,
        [job_id, custom_id, job_id, custom_id],
    )


def get_label(store: Store, job_id: str, custom_id: str, reviewer: str) -> Label | None:
    frame = store.query(
        "SELECT * FROM reviews WHERE job_id = ? AND custom_id = ? AND reviewer = ?",
        [job_id, custom_id, reviewer.strip()],
    )
    return None if frame.empty else _label_of(frame.iloc[0])


def verdicts_of(store: Store, job_id: str, custom_ids: list[str]) -> dict[str, list[str]]:
    """Each result's labels as ``reviewer: verdict`` (every reviewer, by name), in one read."""
    frame = store.query(
        "SELECT custom_id, reviewer, verdict FROM reviews WHERE job_id = ? "
        "AND list_contains(?, custom_id) ORDER BY reviewer",
        [job_id, list(custom_ids)],
    )
    out: dict[str, list[str]] = {}
    for cid, reviewer, verdict in frame.itertuples(index=False):
        out.setdefault(str(cid), []).append(f"{reviewer}: {verdict}")
    return out


# A label's columns of the index, as :func:`sample_labels` reads them
LABEL_COLUMNS = ("job_id", "custom_id", "verdict", "score", "tags", "comment")
LABEL_COLUMNS += ("corrected_answer", "answers")


def sample_labels(store: Store, sample_id: str, reviewer: str) -> dict[tuple[str, str], Label]:
    """The reviewer's labels of a sample's items, by (job_id, custom_id), in one read: Review
    keeps them while it labels, so the next item needs no query."""
    frame = store.query(
        f"""
        SELECT {", ".join(f"v.{c}" for c in LABEL_COLUMNS)} FROM reviews v
        SEMI JOIN sample_items i ON i.job_id = v.job_id AND i.custom_id = v.custom_id
             AND i.sample_id = ?
        WHERE v.reviewer = ?
        """,
        [sample_id, reviewer.strip()],
    )
    # Rows as dicts from the columns' lists, each distinct answers text parsed once: a
    # Series per row (iterrows) took 0.8 s of a page run on 3,800 labels, pandas' records
    # 0.06 s, every label's own parse 0.04 s.
    parsed: dict[str, dict[str, Answer]] = {}
    found = {}
    for row in zip(*(frame[c].tolist() for c in LABEL_COLUMNS), strict=True):
        found[(row[0], row[1])] = _label_of(dict(zip(LABEL_COLUMNS, row, strict=True)), parsed)
    return found


def _label_of(row: Mapping[str, Any], parsed: dict[str, dict[str, Answer]] | None = None) -> Label:
    """A label from its index row; ``parsed``: answers texts already read (filled here)."""
    score, text = row["score"], row.get("answers")
    answers: dict[str, Answer] = {}
    if isinstance(text, str):
        parsed = {} if parsed is None else parsed
        if text not in parsed:
            parsed[text] = json.loads(text)
        # each label its own copy (a multiple choice's list too): labels are edited apart
        answers = {k: list(v) if isinstance(v, list) else v for k, v in parsed[text].items()}
    return Label(
        verdict=row["verdict"],
        score=None if pd.isna(score) else int(score),
        tags=tuple(row["tags"]) if row["tags"] is not None else (),
        comment=row["comment"] or "",
        corrected_answer=row["corrected_answer"] or "",
        answers=answers,
    )


def reviewers(store: Store, sample_id: str | None = None) -> list[str]:
    """Everyone who labelled (items of the sample, when given)."""
    clause, params = _in_sample(sample_id)
    frame = store.query(f"SELECT DISTINCT v.reviewer FROM reviews v {clause} ORDER BY 1", params)
    return list(frame["reviewer"])


def _in_sample(sample_id: str | None) -> tuple[str, list[Any]]:
    """Restricts labels on ``reviews v`` to a sample's items (any reviewer's label counts,
    wherever it was made: the label belongs to the result, not to the sample)."""
    if sample_id is None:
        return "", []
    return (
        "SEMI JOIN sample_items i ON i.job_id = v.job_id AND i.custom_id = v.custom_id "
        "AND i.sample_id = ?",
        [sample_id],
    )


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval for a proportion (95% by default); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class PassRate:
    """Verdict counts and the pass rate over decided items (``unsure`` and reviewers' own
    labels left out, counted apart in ``own``)."""

    passed: int
    failed: int
    unsure: int
    own: dict[str, int] = field(default_factory=dict)

    @property
    def decided(self) -> int:
        return self.passed + self.failed

    @property
    def rate(self) -> float | None:
        return self.passed / self.decided if self.decided else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.passed, self.decided)

    def describe(self) -> str:
        own = "".join(f"; {n} {name}" for name, n in sorted(self.own.items()))
        if not self.decided:
            return "no pass/fail verdicts yet" + own
        low, high = self.interval
        return (
            f"{self.rate:.0%} pass ({self.passed} of {self.decided}; "
            f"95% CI {low:.0%}–{high:.0%}); {self.unsure} unsure{own}"
        )


def pass_rate(store: Store, sample_id: str | None = None, reviewer: str | None = None) -> PassRate:
    """Counts verdicts (of one reviewer, and within a sample, when given)."""
    clause, params = _in_sample(sample_id)
    if reviewer:
        clause += " WHERE v.reviewer = ?"
        params.append(reviewer)
    frame = store.query(
        f"SELECT v.verdict, count(*) AS n FROM reviews v {clause} GROUP BY 1", params
    )
    counts = {str(v): int(n) for v, n in zip(frame["verdict"], frame["n"], strict=True)}
    own = {v: n for v, n in counts.items() if v not in VERDICTS}
    return PassRate(counts.get("pass", 0), counts.get("fail", 0), counts.get("unsure", 0), own)


def progress(store: Store, sample_id: str, reviewer: str) -> tuple[int, int]:
    """(items of the sample this reviewer labelled, items in the sample)."""
    frame = store.query(
        """
        SELECT count(v.verdict) AS done, count(*) AS total
        FROM sample_items i
        LEFT JOIN reviews v ON v.job_id = i.job_id AND v.custom_id = i.custom_id
             AND v.reviewer = ?
        WHERE i.sample_id = ?
        """,
        [reviewer.strip(), sample_id],
    )
    return int(frame["done"].iloc[0]), int(frame["total"].iloc[0])


def reviewer_rows(store: Store, sample_id: str, people: list[str]) -> list[dict[str, Any]]:
    """Each reviewer's progress and pass rate on a sample, one row a reviewer (a table's)."""
    rows = []
    for person in people:
        done, total = progress(store, sample_id, person)
        rate = pass_rate(store, sample_id, person)
        rows.append(
            {"reviewer": person, "labelled": done, "of": total, "pass rate": rate.describe()}
        )
    return rows


def queue_rows(store: Store, queue: qu.Queue, keys: list[qu.Key]) -> list[dict[str, Any]]:
    """Each reviewer's share of a sample's queue (``keys``: its items in order), one row a
    reviewer: items assigned, labelled, left, and put off (skipped, not labelled yet)."""
    folder, sample_id = store.human_dir, queue.sample_id
    labelled = {p: set(sample_labels(store, sample_id, p)) for p in queue.reviewers}
    put_off = {p: qu.skipped(folder, sample_id, p) for p in queue.reviewers}
    return [
        {"reviewer": p.reviewer, "assigned": p.assigned, "labelled": p.labelled,
         "left": p.left, "skipped": p.skipped}
        for p in qu.progress(queue, keys, labelled, put_off)
    ]  # fmt: skip


def queue_items(store: Store, queue: qu.Queue, items: pd.DataFrame, reviewer: str) -> pd.DataFrame:
    """The reviewer's share of a sample's items (``items``: the sample's, in its order, with
    ``job_id`` and ``custom_id``) in queue order: their items, the ones they skipped last."""
    keys = list(zip(items["job_id"], items["custom_id"], strict=True))
    put_off = qu.skipped(store.human_dir, queue.sample_id, reviewer)
    at = {key: n for n, key in enumerate(keys)}  # by position: a MultiIndex .loc took 60 ms
    order = qu.queue_order(queue, keys, reviewer, put_off)
    return items.iloc[[at[key] for key in order]].reset_index(drop=True)


def skip_item(
    store: Store, sample_id: str, reviewer: str, items: pd.DataFrame, pos: int
) -> pd.DataFrame:
    """Skip: records that the reviewer put off the item at ``pos`` of their queue (``items``
    in the order :func:`queue_items` gives) and returns the queue as it reads now, that
    item last (the last skip comes last), without reading the skips again."""
    key = (items["job_id"].iat[pos], items["custom_id"].iat[pos])
    qu.skip(store.human_dir, sample_id, reviewer, key)
    order = [*range(pos), *range(pos + 1, len(items)), pos]
    return items.iloc[order].reset_index(drop=True)


def cohen_kappa(a: list[str], b: list[str]) -> float | None:
    """Cohen's kappa of two raters' labels of the same items; None without items, 1.0 when
    both always agree on a single category (no disagreement to correct for)."""
    if len(a) != len(b):
        raise ValueError("both raters must label the same items")
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    categories = set(a) | set(b)
    expected = sum((a.count(c) / n) * (b.count(c) / n) for c in categories)
    if expected == 1:
        return 1.0
    return (observed - expected) / (1 - expected)


@dataclass
class Agreement:
    """Two reviewers over the items both labelled."""

    items: int
    agreed: int
    kappa: float | None
    table: pd.DataFrame

    @property
    def observed(self) -> float | None:
        return self.agreed / self.items if self.items else None


def agreement(
    store: Store, reviewer_a: str, reviewer_b: str, sample_id: str | None = None
) -> Agreement:
    """Verdict agreement between two reviewers, with a confusion table."""
    clause, params = _in_sample(sample_id)
    frame = store.query(
        f"""
        SELECT v.verdict AS a, w.verdict AS b
        FROM reviews v
        JOIN reviews w ON w.job_id = v.job_id AND w.custom_id = v.custom_id
             AND w.reviewer = ?
        {clause}
        {"AND" if clause else "WHERE"} v.reviewer = ?
        """,
        [reviewer_b, *params, reviewer_a],
    )
    a, b = list(frame["a"]), list(frame["b"])
    # Each side's verdicts name their reviewer: a table shows its columns' axis name
    # nowhere, and reviewer B's side went unlabelled.
    table = (
        pd.crosstab(
            frame["a"].map(lambda v: f"{reviewer_a} (A): {v}"),
            frame["b"].map(lambda v: f"{reviewer_b} (B): {v}"),
        ).rename_axis(index=None, columns=None)
        if len(frame)
        else pd.DataFrame()
    )
    return Agreement(
        items=len(a),
        agreed=sum(x == y for x, y in zip(a, b, strict=True)),
        kappa=cohen_kappa(a, b),
        table=table,
    )


def labels(store: Store, sample_id: str | None = None) -> pd.DataFrame:
    """All labels (of a sample's items, when given) with the labelled result's answer."""
    clause, params = _in_sample(sample_id)
    return store.query(
        f"""
        SELECT v.job_id, v.custom_id, v.reviewer, v.verdict, v.score,
               array_to_string(v.tags, ', ') AS tags, v.comment, v.corrected_answer,
               CAST(v.answers AS VARCHAR) AS answers, v.updated_at
        FROM reviews v {clause}
        ORDER BY v.job_id, v.custom_id, v.reviewer
        """,
        params,
    )


def tally(store: Store, by: str = "job_id") -> pd.DataFrame:
    """Verdict counts and pass rate with its 95% interval, per job, model, prompt version or
    reviewer; reviewers' own labels as "name=count; ..." in ``own_labels``."""
    groups = {
        "job_id": "v.job_id",
        "model": "r.model",
        "prompt_version": "r.prompt_version",
        "reviewer": "v.reviewer",
    }
    if by not in groups:
        raise ReviewError(f"tally by one of {', '.join(groups)}")
    frame = store.query(
        f"""
        SELECT {groups[by]} AS {by},
               count(*) FILTER (WHERE v.verdict = 'pass') AS passed,
               count(*) FILTER (WHERE v.verdict = 'fail') AS failed,
               count(*) FILTER (WHERE v.verdict = 'unsure') AS unsure,
               avg(v.score) AS mean_score,
               string_agg(v.verdict, chr(0) ORDER BY v.verdict)
                   FILTER (WHERE NOT list_contains(?, v.verdict)) AS own
        FROM reviews v
        LEFT JOIN results r ON r.job_id = v.job_id AND r.custom_id = v.custom_id
        GROUP BY 1 ORDER BY 1
        """,
        [list(VERDICTS)],
    )
    frame["own_labels"] = [_counted(own) for own in frame.pop("own")]
    rates = [
        PassRate(int(p), int(f), int(u)) for p, f, u in frame[["passed", "failed", "unsure"]].values
    ]
    frame["pass_rate"] = [r.rate for r in rates]
    frame["ci_low"] = [r.interval[0] if r.decided else None for r in rates]
    frame["ci_high"] = [r.interval[1] if r.decided else None for r in rates]
    return frame


def _counted(joined: str | None) -> str:
    """Own labels joined by NUL (names hold no control character) as "name=count; ..."."""
    if not joined or pd.isna(joined):
        return ""
    counts: dict[str, int] = {}
    for name in joined.split("\0"):
        counts[name] = counts.get(name, 0) + 1
    return "; ".join(f"{name}={n}" for name, n in counts.items())
