"""Agreement of many reviewers on a sample: Krippendorff's alpha per question and per pair,
the items whose reviewers differ, and an owner's adjudication of an item's final label.

Each question of a label is measured at its level: a choice (the verdict) as nominal data,
a rating (the score) as ordinal data. Alpha takes every item at least two reviewers
labelled, however many reviewers each has; it is 1 for full agreement, 0 for agreement at
chance, and undefined where every label holds one value (nothing varies: no chance to
correct for). Its 95% interval is a percentile bootstrap over items, with a fixed seed so
that a page, the command line and a dataset card show the same figures.

The point estimate is the ``krippendorff`` package's. The bootstrap's resamples are
computed here from coincidence matrices: a call of the package costs ~9 ms on 10,000
items, so 1,000 resamples would take seconds; the resamples are drawn over the items'
distinct label patterns (items of one pattern are interchangeable), one multinomial draw
each, and their alphas are one array expression (the tests hold both against each other).

A question is a column of the labels table with its level and, for a rating, its ordered
values: a sample's label schema (``core.human.questions``) adds its single choices (nominal,
over the owner's options), its ratings (ordinal, over the scale) and its multiple choices
(sets of options, by the MASI distance) as more of them.

A multiple choice is measured as one question with Krippendorff's alpha over the MASI
distance (Passonneau 2006, "Measuring Agreement on Set-valued Items"; NLTK's
``masi_distance`` with its ``AnnotationTask``), the standard measure for set-valued
annotation, rather than as a yes/no alpha per option: it gives the question one figure
where the other questions show theirs, and two sets that share options count as partly
agreeing (per option, {a, b} against {a} would be one agreement and one disagreement
between two unrelated questions, with "not picked" read as a decision). An unanswered
multiple choice is missing, as an unanswered question is (a label keeps no empty set).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Literal

import krippendorff
import numpy as np
import pandas as pd

from core.human.files import VERDICTS, AdjudicationRecord, append, now_utc
from core.human.label_schemas import schema_of
from core.human.questions import LabelSchema
from core.store import review as rv
from core.store.db import Store

Level = Literal["nominal", "ordinal", "masi"]
LEVELS: dict[str, str] = {"nominal": "nominal", "ordinal": "ordinal", "masi": "sets, MASI"}
RESAMPLES = 1000
SEED = 0  # the bootstrap's: the same labels give the same interval everywhere


@dataclass(frozen=True)
class Question:
    """One question of a label: ``column`` of the labels table, measured at ``level``;
    ``values`` orders a rating's values (a choice's are those given; a multiple choice's
    are its options, and its values the sets of them given, as frozensets)."""

    column: str
    title: str
    level: Level
    values: tuple[Any, ...] = ()


# Today's label: the verdict (pass / fail / unsure or a reviewer's own label) and a score.
QUESTIONS = (
    Question("verdict", "Verdict", "nominal"),
    Question("score", "Score (1–5)", "ordinal", (1, 2, 3, 4, 5)),
)


@dataclass
class Alpha:
    """Krippendorff's alpha of one question, or why it has none (``problem``)."""

    question: str
    level: Level
    items: int  # items with values of at least two reviewers (the ones alpha reads)
    values: int  # the values on those items
    alpha: float | None = None
    low: float | None = None  # the 95% bootstrap interval
    high: float | None = None
    problem: str | None = None

    def describe(self) -> str:
        """ "0.62 (95% CI 0.41 to 0.80) over 40 items", or the reason there is none."""
        if self.alpha is None:
            return self.problem or "no figure"
        text = f"{self.alpha:.2f}"
        if self.low is not None and self.high is not None:
            text += f" (95% CI {self.low:.2f} to {self.high:.2f})"
        return f"{text} over {self.items:,} items"


def value_counts(values: pd.Series, units: np.ndarray, domain: list[Any]) -> np.ndarray:
    """The items' value counts (items x values): how many reviewers gave each value of
    ``domain`` to each item (``units``: the item of each value) that has one (the
    reliability data as the package reads it)."""
    return counts_of(value_codes(values, domain), units, len(domain))


def value_codes(values: pd.Series, domain: list[Any]) -> np.ndarray:
    """Each value's place in ``domain``; -1 for none."""
    index = {v: i for i, v in enumerate(domain)}
    return values.map(index).fillna(-1).to_numpy(dtype=np.int64)


def counts_of(codes: np.ndarray, units: np.ndarray, width: int) -> np.ndarray:
    """The value counts (items x ``width`` values) of value codes (-1: none) and their items."""
    given = codes >= 0
    if not given.any():
        return np.zeros((0, width), dtype=np.int64)
    _, items = np.unique(units[given], return_inverse=True)
    flat = np.bincount(items * width + codes[given], minlength=(items.max() + 1) * width)
    return flat.reshape(-1, width)


def alpha_of(counts: np.ndarray, question: Question, domain: list[Any]) -> Alpha:
    """Alpha of value counts (items x values), its bootstrap interval, or the reason why
    there is none: fewer than two reviewers on every item, or one value everywhere."""
    pairable = counts[counts.sum(axis=1) >= 2]
    got = Alpha(question.title, question.level, len(pairable), int(pairable.sum()))
    if not len(pairable):
        got.problem = "no item has this answered by two reviewers yet: alpha needs two"
        return got
    used = np.flatnonzero(pairable.sum(axis=0))
    if len(used) == 1:
        got.problem = (
            f"every label is {_shown(domain[used[0]])}: alpha is undefined without any variation "
            "(the reviewers agree, but nothing shows it is beyond chance)"
        )
        return got
    if question.level == "masi":
        distance = masi_distances(domain, question.values)
        got.alpha = float(
            krippendorff.alpha(
                value_counts=pairable,
                value_domain=np.arange(len(domain)),
                level_of_measurement=lambda v1, v2, i1, i2, **_: distance[i1, i2],
            )
        )
        got.low, got.high = interval(pairable, "masi", distance=distance)
        return got
    got.alpha = float(
        krippendorff.alpha(
            value_counts=pairable,
            value_domain=domain,
            level_of_measurement=question.level,
        )
    )
    got.low, got.high = interval(pairable, question.level)
    return got


def _shown(value: Any) -> str:
    """A value as a problem quotes it (a multiple choice's set as its options)."""
    return "{" + ", ".join(sorted(value)) + "}" if isinstance(value, frozenset) else str(value)


def masi_distances(sets: list[frozenset[str]], options: tuple[Any, ...]) -> np.ndarray:
    """The MASI distance of each pair of non-empty option sets (sets x sets): 1 - J * M,
    with J their Jaccard index (shared over all options picked) and M 1 for equal sets,
    2/3 where one holds the other, 1/3 where they only overlap, 0 where they are disjoint
    (Passonneau 2006's weights; NLTK rounds them to 0.67 and 0.33)."""
    index = {o: i for i, o in enumerate(options)}
    picked = np.zeros((len(sets), len(options)))
    for row, chosen in enumerate(sets):
        picked[row, [index[o] for o in chosen]] = 1
    shared = picked @ picked.T
    size = picked.sum(axis=1)
    a, b = size[:, None], size[None, :]
    union = a + b - shared
    monotone = np.select(
        [(shared == a) & (shared == b), shared == np.minimum(a, b), shared > 0],
        [1.0, 2 / 3, 1 / 3],
        0.0,
    )
    return 1 - shared / union * monotone


def interval(
    counts: np.ndarray,
    level: Level,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    distance: np.ndarray | None = None,
) -> tuple[float | None, float | None]:
    """The 95% percentile bootstrap interval of alpha over items (resampled with
    replacement); resamples where alpha is undefined (one value) are left out. ``distance``:
    the values' distances (values x values), for MASI."""
    patterns, per_pattern = unique_rows(counts)
    rng = np.random.default_rng(seed)
    drawn = rng.multinomial(len(counts), per_pattern / len(counts), size=resamples)
    if distance is not None:
        values = _fixed_alphas(drawn, patterns, distance)
    else:
        v = counts.shape[1]
        summed = drawn @ _coincidences(patterns).reshape(len(patterns), v * v)
        values = alphas(summed.reshape(-1, v, v), level)
    values = values[~np.isnan(values)]
    if not len(values):
        return None, None
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def _coincidences(counts: np.ndarray) -> np.ndarray:
    """Each item's coincidence matrix (items x values x values): its ordered pairs of values
    from different reviewers, weighted 1 / (reviewers - 1) (Krippendorff's o_ck)."""
    outer = counts[:, :, None] * counts[:, None, :]
    pairs = outer - counts[:, :, None] * np.eye(counts.shape[1], dtype=counts.dtype)
    return pairs / (counts.sum(axis=1) - 1)[:, None, None]


def unique_rows(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(counts, axis=0, return_counts=True)``, in its order (rows sorted as
    tuples), from each row read as one number (its counts the digits, the first column
    highest): a sort of numbers, not of rows (the row sort was a third of agreement's time
    over 20,000 labels). Rows too wide for one number go to ``np.unique``."""
    base = int(counts.max(initial=0)) + 1
    if len(counts) == 0 or base ** counts.shape[1] >= 2**62:
        return np.unique(counts, axis=0, return_counts=True)
    places = base ** np.arange(counts.shape[1] - 1, -1, -1, dtype=np.int64)
    _, first, per = np.unique(counts @ places, return_index=True, return_counts=True)
    return counts[first], per


def _fixed_alphas(drawn: np.ndarray, patterns: np.ndarray, distance: np.ndarray) -> np.ndarray:
    """Alpha of each resample (``drawn``: how many items of each pattern) under a distance
    that does not depend on the values' counts (MASI's): a pattern's observed disagreement
    is one number, so a resample needs its value counts, not its values x values
    coincidences (a multiple choice has as many values as sets were given)."""
    # per pattern: sum of o_ck d_ck = (c d c - sum of c_c d_cc) / (reviewers - 1)
    pairs = ((patterns @ distance) * patterns).sum(axis=1) - patterns**2 @ np.diag(distance)
    observed = pairs / (patterns.sum(axis=1) - 1)
    n_v = drawn @ patterns
    expected = ((n_v @ distance) * n_v).sum(axis=1)
    n = n_v.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(expected > 0, 1 - (n - 1) * (drawn @ observed) / expected, np.nan)


def alphas(coincidences: np.ndarray, level: Level) -> np.ndarray:
    """Alpha of each of summed coincidence matrices (rows x values x values); NaN where
    every value is one (no expected disagreement)."""
    o = coincidences
    v = o.shape[1]
    n_v = o.sum(axis=1)
    n = n_v.sum(axis=1)
    if level == "nominal":
        d = np.broadcast_to(1.0 - np.eye(v), o.shape)
    else:  # ordinal: (n_c + ... + n_k - (n_c + n_k) / 2)^2 for c <= k
        upto = np.cumsum(n_v, axis=1)
        low, high = np.minimum.outer(range(v), range(v)), np.maximum.outer(range(v), range(v))
        between = upto[:, high] - upto[:, low] + n_v[:, low]
        d = (between - (n_v[:, low] + n_v[:, high]) / 2) ** 2
    observed = (o * d).sum(axis=(1, 2))
    expected = (n_v[:, :, None] * n_v[:, None, :] * d).sum(axis=(1, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(expected > 0, 1 - (n - 1) * observed / expected, np.nan)


def _domain(labels: pd.DataFrame, question: Question) -> list[Any]:
    """A question's values in order: a rating's scale; a multiple choice's sets given
    (fewest options first, then by the options' order); a choice's verdicts, then the own
    labels given, by name."""
    if question.level == "masi":
        order = {o: i for i, o in enumerate(question.values)}
        given = set(labels[question.column].dropna())
        return sorted(given, key=lambda s: (len(s), sorted(order[o] for o in s)))
    if question.values:
        return list(question.values)
    seen = set(labels[question.column].dropna())
    return [*VERDICTS, *sorted(seen - set(VERDICTS))]


def item_codes(labels: pd.DataFrame, item: tuple[str, ...] = ("job_id", "custom_id")) -> np.ndarray:
    """Each label's item as a number (labels of one item share it)."""
    if labels.empty:
        return np.zeros(0, dtype=np.int64)
    return labels.groupby(list(item), sort=False).ngroup().to_numpy()


def question_alphas(
    labels: pd.DataFrame,
    questions: tuple[Question, ...] = QUESTIONS,
    units: np.ndarray | None = None,
    domains: list[list[Any]] | None = None,
) -> list[Alpha]:
    """Alpha of each question over labels (one row per item and reviewer; ``units``: each
    row's item, from :func:`item_codes`; ``domains``: each question's values in order)."""
    units = item_codes(labels) if units is None else units
    domains = domains or [_domain(labels, q) for q in questions]
    codes = [value_codes(labels[q.column], d) for q, d in zip(questions, domains, strict=True)]
    return _alphas(codes, units, questions, domains)


def _alphas(
    codes: list[np.ndarray],
    units: np.ndarray,
    questions: tuple[Question, ...],
    domains: list[list[Any]],
) -> list[Alpha]:
    return [
        alpha_of(counts_of(c, units, len(domain)), q, domain)
        for c, q, domain in zip(codes, questions, domains, strict=True)
    ]


@dataclass
class SampleAgreement:
    """Reviewers' agreement on a sample: per question, per pair, and the items they differ
    on (``disagreements``: one row per item and reviewer, with any adjudication)."""

    reviewers: list[str]
    questions: list[Alpha]
    pairs: pd.DataFrame
    disagreements: pd.DataFrame = field(default_factory=pd.DataFrame)

    def problem(self) -> str | None:
        """Why there is nothing to measure yet, or None."""
        if len(self.reviewers) < 2:
            return (
                f"{len(self.reviewers)} reviewer(s) labelled this sample: agreement needs "
                "two reviewers on the same items"
            )
        if not any(a.items for a in self.questions):
            return "no item has labels of two reviewers yet: agreement needs two on an item"
        return None


def schema_questions(schema: LabelSchema) -> tuple[Question, ...]:
    """A label schema's questions alpha reads: a single choice as nominal data over its
    options, a rating as ordinal data over its scale, a multiple choice as sets of its
    options by the MASI distance (a corrected answer and a comment are not measured)."""
    levels: dict[str, Level] = {"single": "nominal", "rating": "ordinal", "multiple": "masi"}
    return tuple(
        Question(
            f"answer:{q.title}",
            q.title,
            levels[q.type],
            tuple(q.scale) if q.type == "rating" else tuple(q.options),
        )
        for q in schema.questions
        if q.type in levels
    )


def with_answers(labels: pd.DataFrame, questions: tuple[Question, ...]) -> pd.DataFrame:
    """The labels with a column per schema question (``answer:<title>``), read from each
    label's answers (JSON text; NULL without any); None where a label did not answer, or
    answered with a value the schema no longer has (an option since taken out; a multiple
    choice keeps the options it still has, as a frozenset)."""
    texts = labels["answers"] if "answers" in labels else pd.Series([None] * len(labels))
    # Read once per distinct text: answers hold choices and ratings only, so a few hundred
    # texts cover 20,000 labels (parsing each label's took 0.35 s of 0.84 s there).
    kept: dict[Any, tuple[Any, ...]] = {}
    for text in set(texts):
        answers = json.loads(text) if isinstance(text, str) else {}
        kept[text] = tuple(
            _kept(answers.get(q.column.removeprefix("answer:")), q) for q in questions
        )
    rows = [kept[t] for t in texts]
    labels = labels.copy()
    for i, q in enumerate(questions):
        labels[q.column] = pd.Series([r[i] for r in rows], index=labels.index, dtype=object)
    return labels


def _kept(value: Any, question: Question) -> Any:
    if question.level == "masi":
        picked = set(value) if isinstance(value, list) else set()
        return frozenset(o for o in question.values if o in picked) or None
    return value if isinstance(value, str | int) and value in question.values else None


def sample_agreement(store: Store, sample_id: str) -> SampleAgreement:
    """Alpha per question (the verdict, the score, then the sample's schema's choices and
    ratings) over every reviewer, each pair's alpha over the items both labelled, and the
    items whose reviewers' verdicts differ."""
    extra = schema_questions(schema_of(store.human_dir, sample_id))
    labels = with_answers(rv.labels(store, sample_id), extra)
    found = agreement_of(labels, (*QUESTIONS, *extra))
    found.disagreements = disagreements(store, sample_id)
    return found


def agreement_of(
    labels: pd.DataFrame, questions: tuple[Question, ...] = QUESTIONS
) -> SampleAgreement:
    """Alpha per question and per pair of reviewers over labels (one row per item and
    reviewer: job_id, custom_id, reviewer and a column per question)."""
    people = sorted(set(labels["reviewer"]))
    units = item_codes(labels)
    domains = [_domain(labels, q) for q in questions]  # one value order for every pair
    # each label's value codes read once; a pair takes its rows of them
    codes = [value_codes(labels[q.column], d) for q, d in zip(questions, domains, strict=True)]
    who = labels["reviewer"].to_numpy()
    rows = []
    for a, b in combinations(people, 2):
        mine = (who == a) | (who == b)
        # a reviewer's latest label is one per item: an item both labelled has two
        both = np.bincount(units[mine], minlength=len(units))[units[mine]] == 2
        row: dict[str, Any] = {
            "reviewer A": a,
            "reviewer B": b,
            "both labelled": int(both.sum() // 2),
        }
        rows_of = np.flatnonzero(mine)[both]
        for got in _alphas([c[rows_of] for c in codes], units[rows_of], questions, domains):
            row[f"{got.question} α"] = got.alpha
            row[f"{got.question}"] = got.describe()
        rows.append(row)
    found = _alphas(codes, units, questions, domains)
    return SampleAgreement(people, found, pd.DataFrame(rows))


# -- disagreements and adjudication -------------------------------------------------------------


def disagreements(store: Store, sample_id: str) -> pd.DataFrame:
    """The sample's items whose reviewers gave different verdicts: one row per item with
    each reviewer's verdict (and score), the final label where an owner adjudicated it."""
    return store.query(
        """
        WITH differ AS (  -- found first: the labels' text is written for those items only
            SELECT v.job_id, v.custom_id
            FROM reviews v
            SEMI JOIN sample_items i ON i.job_id = v.job_id AND i.custom_id = v.custom_id
                 AND i.sample_id = ?
            GROUP BY ALL
            HAVING count(DISTINCT v.verdict) > 1
        ), shown AS (
            SELECT v.job_id, v.custom_id, any_value(i.position) AS position,
                   string_agg(v.reviewer || ': ' || v.verdict
                              || coalesce(' (' || v.score || ')', ''), '; '
                              ORDER BY v.reviewer) AS labels
            FROM reviews v
            SEMI JOIN differ d ON d.job_id = v.job_id AND d.custom_id = v.custom_id
            JOIN sample_items i ON i.job_id = v.job_id AND i.custom_id = v.custom_id
                 AND i.sample_id = ?
            GROUP BY v.job_id, v.custom_id
        )
        SELECT d.position AS item, d.job_id, d.custom_id, d.labels,
               a.verdict AS adjudicated, a.adjudicator AS adjudicated_by,
               a.saved_at AS adjudicated_at
        FROM shown d
        LEFT JOIN (
            SELECT job_id, custom_id, arg_max(verdict, line_no) AS verdict,
                   arg_max(adjudicator, line_no) AS adjudicator, max(saved_at) AS saved_at
            FROM adjudications GROUP BY ALL
        ) a ON a.job_id = d.job_id AND a.custom_id = d.custom_id
        ORDER BY d.position
        """,
        [sample_id, sample_id],
    )


def final_choices(store: Store, job_id: str, custom_id: str) -> list[str]:
    """The labels an item's final label may be: the verdicts, and any reviewer's own label
    given to it; none when nobody labelled it."""
    given = store.query(
        "SELECT DISTINCT verdict FROM reviews WHERE job_id = ? AND custom_id = ?",
        [job_id, custom_id],
    )
    if given.empty:
        return []
    return [*VERDICTS, *sorted(set(given["verdict"]) - set(VERDICTS))]


def adjudicate(
    store: Store,
    job_id: str,
    custom_id: str,
    verdict: str,
    by: str,
    note: str = "",
    sample_id: str | None = None,
) -> None:
    """Sets an item's final label (an owner's decision over its reviewers' verdicts): in
    its file, then the index; the reviewers' labels stay as they were, and the item's
    history shows both.

    Raises:
        ReviewError: no name, a verdict no reviewer could give, or an item nobody labelled.
    """
    by = by.strip()
    if not by:
        raise rv.ReviewError("enter your name first: an adjudication records who made it")
    allowed = final_choices(store, job_id, custom_id)
    if not allowed:
        raise rv.ReviewError(
            f"no reviewer labelled {job_id}/{custom_id}: adjudicate an item reviewers labelled"
        )
    if verdict not in allowed:
        raise rv.ReviewError(f"the final label must be one of {', '.join(allowed)}")
    record = AdjudicationRecord(
        job_id=job_id,
        custom_id=custom_id,
        verdict=verdict,
        by=by,
        note=note.strip() or None,
        sample_id=sample_id,
        at=now_utc(),
    )
    append(store.human_dir, record)
    store.sync_human()
