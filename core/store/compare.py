"""Comparing two sets of answers to the same prompts: two jobs, or two slices of one job.

Each side is a job, optionally narrowed to one value of a field (the model, the prompt
version, a metadata key, or an experiment's variant). Items pair on ``custom_id`` or, within
one job (where ids are unique), on a metadata key such as ``item_id`` or an experiment's
item. A word-level diff, length and token deltas,
and a preference label (A / B / tie) per pair with a tally.
"""

from __future__ import annotations

import difflib
import hashlib
import html
import json
import re
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from core.human.files import PreferenceRecord, append, now_utc
from core.schemas import JobSpec
from core.store.db import Store
from core.store.judged import PairwiseTally, judges, pairwise_tally
from core.store.results import metadata_path
from core.store.schema import SHOWN_ANSWER_SQL, natural_key, natural_sql

CHOICES = ("A", "B", "tie")
# An experiment runs as one job whose lines' custom_ids are t<test>.p<prompt>.m<provider>
# (core.experiments.runs.custom_id): its variant is the p<prompt>.m<provider> part, its item
# the t<test> part, so two variants of one experiment are two slices paired by item.
VARIANT, ITEM = "variant", "item"
EXPERIMENT_LINE = r"^(t[0-9]+)\.(p[0-9]+\.m[0-9]+)$"  # groups: the item, the variant
SPLIT_FIELDS = ("model", "prompt_version", VARIANT)  # or "metadata:<key>"


class CompareError(ValueError):
    """A comparison that cannot be made; the message says why."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a job, optionally one value of a field within it."""

    job_id: str
    field: str | None = None
    value: str | None = None

    def label(self, job: str | None = None, value: str | None = None) -> str:
        """The side as text: its job (``job``, e.g. the job's label, else its id) and slice
        (its value named ``value``, e.g. an experiment's variant by its label)."""
        shown = value or self.value
        return (job or self.job_id) + (f" [{self.field}={shown}]" if self.field else "")


def _field_sql(field: str, params: list[Any]) -> str:
    if field in (VARIANT, ITEM):  # a line of no experiment has neither (NULL)
        group = 1 if field == ITEM else 2
        return f"nullif(regexp_extract(r.custom_id, '{EXPERIMENT_LINE}', {group}), '')"
    if field.startswith("metadata:"):
        params.append(metadata_path(field.removeprefix("metadata:")))
        return "(r.metadata ->> ?)"
    if field not in SPLIT_FIELDS:
        raise CompareError(f"cannot split by {field!r}")
    return f"r.{field}"


def _side_sql(side: Side, key: str, params: list[Any]) -> str:
    key_params: list[Any] = []
    key_sql = "r.custom_id" if key == "custom_id" else _field_sql(key, key_params)
    params.extend(key_params)
    params.append(side.job_id)
    where = "r.job_id = ?"
    if side.field:
        where += f" AND {_field_sql(side.field, params)} = ?"
        params.append(str(side.value))
    params.extend(key_params)  # the key appears again in the WHERE clause
    return f"""
        SELECT {key_sql} AS key, r.job_id, r.custom_id, r.status,
               {SHOWN_ANSWER_SQL} AS answer, r.finish_reason,
               r.prompt, r.prompt_tokens, r.completion_tokens, r.model,
               CAST(q.messages AS VARCHAR) AS messages
        FROM results r
        LEFT JOIN requests q ON q.job_id = r.job_id AND q.custom_id = r.custom_id
        WHERE {where} AND {key_sql} IS NOT NULL
    """


def comparison_id(a: Side, b: Side, key: str) -> str:
    """A stable id for a pair of sides, under which preferences are kept."""
    text = json.dumps([asdict(a), asdict(b), key], sort_keys=True)
    return "cmp_" + hashlib.sha1(text.encode()).hexdigest()[:12]


def _paired(
    a: Side, b: Side, key: str, params: list[Any], succeeded: bool, after: str | None
) -> str:
    """``WITH a, b ... FROM a JOIN b USING (key) WHERE ...``: the pairs of two sides (both
    answers succeeded, with ``succeeded``; keys past ``after`` only, with ``after``)."""
    if a == b:
        raise CompareError("choose two different sides")
    sql_a = _side_sql(a, key, params)
    sql_b = _side_sql(b, key, params)
    filters = ["true"]
    if succeeded:
        filters.append("a.status = 'succeeded' AND b.status = 'succeeded'")
    if after is not None:
        filters.append(f"{natural_sql('a.key')} > ?")
        params.append(natural_key(after))
    where = " AND ".join(filters).replace("{", "{{").replace("}", "}}")  # {1,99}: not a field
    return f"WITH a AS ({sql_a}), b AS ({sql_b}) {{}} FROM a JOIN b USING (key) WHERE {where}"


def pairs(
    store: Store,
    a: Side,
    b: Side,
    key: str = "custom_id",
    limit: int = 5000,
    *,
    succeeded: bool = False,
    after: str | None = None,
) -> pd.DataFrame:
    """The pairs present on both sides, by key in natural order (``t2`` before ``t10``),
    with length and token deltas (B minus A); with ``succeeded``, only pairs of two answers;
    with ``after``, the keys past it (the next page)."""
    params: list[Any] = []
    paired = _paired(a, b, key, params, succeeded, after)
    select = """
        SELECT a.key, a.custom_id AS custom_id_a, b.custom_id AS custom_id_b,
               coalesce(a.prompt, b.prompt) AS prompt,
               a.prompt AS prompt_a, b.prompt AS prompt_b,
               a.messages AS messages_a, b.messages AS messages_b,
               a.status AS status_a, b.status AS status_b,
               a.answer AS answer_a, b.answer AS answer_b,
               a.finish_reason AS finish_a, b.finish_reason AS finish_b,
               length(b.answer) - length(a.answer) AS chars_delta,
               b.completion_tokens - a.completion_tokens AS tokens_delta,
               a.completion_tokens AS tokens_a, b.completion_tokens AS tokens_b"""
    order = f"ORDER BY {natural_sql('a.key')} LIMIT ?"
    return store.query(f"{paired.format(select)} {order}", [*params, int(limit)])


def paired_keys(
    store: Store,
    a: Side,
    b: Side,
    key: str = "custom_id",
    limit: int = 5000,
    *,
    succeeded: bool = False,
) -> list[str]:
    """The first ``limit`` keys present on both sides, in the order :func:`pairs` pages
    through them (only the keys: cheap for a million pairs)."""
    params: list[Any] = []
    paired = _paired(a, b, key, params, succeeded, None)
    sql = f"{paired.format('SELECT a.key')} ORDER BY {natural_sql('a.key')} LIMIT ?"
    return [str(k) for k in store.query(sql, [*params, int(limit)])["key"]]


def coverage(store: Store, a: Side, b: Side, key: str = "custom_id") -> dict[str, int]:
    """How many keys each side has, and how many pair up."""
    params: list[Any] = []
    sql_a = _side_sql(a, key, params)
    sql_b = _side_sql(b, key, params)
    row = store.query(
        f"""
        WITH a AS ({sql_a}), b AS ({sql_b})
        SELECT (SELECT count(DISTINCT key) FROM a) AS only_a_total,
               (SELECT count(DISTINCT key) FROM b) AS only_b_total,
               (SELECT count(DISTINCT key) FROM a JOIN b USING (key)) AS paired
        """,
        params,
    ).iloc[0]
    return {
        "a": int(row["only_a_total"]),
        "b": int(row["only_b_total"]),
        "paired": int(row["paired"]),
    }


_TOKENS = re.compile(r"\s+|[^\s]+")


def word_diff(a: str | None, b: str | None) -> list[tuple[str, str]]:
    """The word-level diff from ``a`` to ``b`` as ``(op, text)`` with op ``=``, ``-`` or ``+``;
    whitespace is kept so the pieces join back into either text."""
    words_a = _TOKENS.findall(a or "")
    words_b = _TOKENS.findall(b or "")
    raw: list[tuple[str, str]] = []
    matcher = difflib.SequenceMatcher(a=words_a, b=words_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            raw.append(("=", "".join(words_a[i1:i2])))
            continue
        if i2 > i1:
            raw.append(("-", "".join(words_a[i1:i2])))
        if j2 > j1:
            raw.append(("+", "".join(words_b[j1:j2])))
    return _joined_changes(raw)


def _joined_changes(raw: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Changes apart only by white space become one removed and one added piece, the
    space kept inside each (``[-zu spät-]{+spät an+}``, not ``zu``/``spät`` then ``spät``/
    ``an``, which read as words run together)."""
    out: list[tuple[str, str]] = []
    group: list[tuple[str, str]] = []

    def flush() -> None:
        trailing = []
        while group and group[-1][0] == "=":  # space after the last change is no part of it
            trailing.insert(0, group.pop())
        ops = {op for op, _ in group}
        if {"-", "+"} <= ops:
            out.append(("-", "".join(t for op, t in group if op != "+")))
            out.append(("+", "".join(t for op, t in group if op != "-")))
        else:
            out.extend(group)
        out.extend(trailing)
        group.clear()

    for op, text in raw:
        if op != "=" or (group and text.isspace()):
            group.append((op, text))
        else:
            flush()
            out.append((op, text))
    flush()
    return out


def diff_text(a: str | None, b: str | None) -> str:
    """The diff as plain text: ``[-removed-]`` and ``{+added+}`` (git's word-diff style)."""
    parts = []
    for op, text in word_diff(a, b):
        parts.append(text if op == "=" else f"[-{text}-]" if op == "-" else f"{{+{text}+}}")
    return "".join(parts)


DIFF_STYLES = {
    "-": "background:#ffd7d5;color:#82071e;text-decoration:line-through",
    "+": "background:#ccffd8;color:#055d20",
}


def diff_html(a: str | None, b: str | None) -> str:
    """The diff coloured for a page: removed words struck through on red, added ones on
    green. Every word is HTML-escaped: an answer is shown as the text it is."""
    parts, last = [], ("=", "")
    for op, text in word_diff(a, b):
        escaped = html.escape(text)
        if op == "+" and last[0] == "-" and not (last[1][-1:].isspace() or text[:1].isspace()):
            parts.append(" ")  # the removed words and the added ones are apart, not one word
        parts.append(escaped if op == "=" else f'<span style="{DIFF_STYLES[op]}">{escaped}</span>')
        last = (op, text)
    return '<div style="white-space:pre-wrap;line-height:1.6">' + "".join(parts) + "</div>"


def similarity(a: str | None, b: str | None) -> float:
    """Share of words the two answers have in common, in order (0 to 1)."""
    words_a, words_b = (a or "").split(), (b or "").split()
    if not words_a and not words_b:
        return 1.0
    return difflib.SequenceMatcher(a=words_a, b=words_b, autojunk=False).ratio()


def save_preference(
    store: Store,
    comparison: str,
    key: str,
    reviewer: str,
    choice: str,
    pair: dict[str, Any],
    a: Side,
    b: Side,
) -> None:
    """Records which answer a reviewer prefers for one pair (replaces an earlier choice)."""
    if not reviewer.strip():
        raise CompareError("enter your reviewer name first")
    if choice not in CHOICES:
        raise CompareError(f"choice must be one of {', '.join(CHOICES)}")
    record = PreferenceRecord(
        comparison=comparison,
        key=str(key),
        reviewer=reviewer.strip(),
        job_a=a.job_id,
        custom_id_a=pair.get("custom_id_a"),
        job_b=b.job_id,
        custom_id_b=pair.get("custom_id_b"),
        choice=choice,
        at=now_utc(),
    )
    append(store.human_dir, record)  # the file first: the index is rebuilt from it
    store.sync_human()


def preference_of(store: Store, comparison: str, key: str, reviewer: str) -> str | None:
    frame = store.query(
        "SELECT choice FROM preferences WHERE comparison = ? AND key = ? AND reviewer = ?",
        [comparison, str(key), reviewer.strip()],
    )
    return None if frame.empty else str(frame["choice"].iloc[0])


def preference_tally(store: Store, comparison: str) -> dict[str, int]:
    """How often A, B and tie were chosen in a comparison (every reviewer)."""
    frame = store.query(
        "SELECT choice, count(*) AS n FROM preferences WHERE comparison = ? GROUP BY choice",
        [comparison],
    )
    counts = dict(zip(frame["choice"], frame["n"], strict=True))
    return {c: int(counts.get(c, 0)) for c in CHOICES}


def split_values(store: Store, job_id: str, field: str, limit: int = 200) -> list[str]:
    """The values a field takes in a job (to pick a side within one job), in natural order."""
    params: list[Any] = []
    expr = _field_sql(field, params)
    frame = store.query(
        f"SELECT DISTINCT {expr} AS v FROM results r WHERE r.job_id = ? AND v IS NOT NULL "
        f"ORDER BY {natural_sql('v')} LIMIT ?",
        [*params, job_id, int(limit)],
    )
    return [str(v) for v in frame["v"]]


NOT_SET = "(not set)"  # a parameter one job's lines do not give


def job_differences(store: Store, spec_a: JobSpec, spec_b: JobSpec) -> pd.DataFrame:
    """What differs between two jobs, one row per setting (setting, A, B): the models
    their lines run on, prompt versions and request parameters (up to five distinct values
    each, from the index), the input file, engine settings and job defaults."""

    def facts(spec: JobSpec) -> dict[str, str]:
        def distinct(column: str) -> str:
            values = store.query(
                f"SELECT DISTINCT CAST({column} AS VARCHAR) AS v FROM requests "
                "WHERE job_id = ? AND v IS NOT NULL ORDER BY 1 LIMIT 5",
                [spec.job_id],
            )["v"]
            return "; ".join(values) or "(none)"

        def answered_by() -> str:
            """The models its answers carry (an adapter by its own name), from the index;
            the models it may run on while it has no results."""
            models = store.query(
                "SELECT DISTINCT model FROM results WHERE job_id = ? AND model IS NOT NULL "
                "ORDER BY 1",
                [spec.job_id],
            )["model"]
            return ", ".join(models) or ", ".join(spec.model_names())

        engine = spec.engine.model_dump(exclude={"model"})
        return {
            "model": answered_by(),
            "prompt version": distinct("prompt_version"),
            **request_parameters(spec.job_id),
            "input file": spec.source,
            **{f"engine {name}": str(value) for name, value in engine.items()},
            **{f"default {name}": str(v) for name, v in spec.defaults.model_dump().items()},
        }

    def request_parameters(job_id: str) -> dict[str, str]:
        """Each body parameter (``temperature``, ``max_tokens``...) a row of its own, with
        its distinct values: the one that differs is seen, not cut off in a JSON cell."""
        bodies = store.query(
            "SELECT DISTINCT CAST(params AS VARCHAR) AS v FROM requests "
            "WHERE job_id = ? AND v IS NOT NULL LIMIT 50",
            [job_id],
        )["v"]
        values: dict[str, set[str]] = {}
        for text in bodies:
            try:
                body = json.loads(text)
            except ValueError:
                continue
            for name, value in body.items() if isinstance(body, dict) else ():
                if name == "model":
                    continue  # the "model" row says it
                shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                values.setdefault(name, set()).add(shown)
        return {
            f"request {name}": "; ".join(sorted(v)[:5]) + ("; ..." if len(v) > 5 else "")
            for name, v in sorted(values.items())
        }

    a, b = facts(spec_a), facts(spec_b)
    names = [*a, *(name for name in b if name not in a)]
    return pd.DataFrame(
        [
            {"setting": name, "A": a.get(name, NOT_SET), "B": b.get(name, NOT_SET)}
            for name in names
            if a.get(name, NOT_SET) != b.get(name, NOT_SET)
        ],
        columns=["setting", "A", "B"],
    )


# -- the pairwise judges of a comparison (core.qa.pairwise starts them) ---------------------


def judge_sides(row: Any) -> tuple[Side, Side, str]:
    """A pairwise judge's sides A and B and what they pair on, from a row of
    :func:`core.store.judged.judges` (its ``job.json``'s ``judge``: core.schemas.JudgeLink)."""
    job_a, job_b = row.graded
    if not row.split:
        return Side(job_a), Side(job_b), str(row.pair_on)
    value_a, value_b = row.split_values
    return Side(job_a, row.split, value_a), Side(job_b, row.split, value_b), str(row.pair_on)


def pairwise_judges(store: Store, a: Side, b: Side, key: str) -> pd.DataFrame:
    """The pairwise judges of this comparison (two jobs, or two slices of one paired on
    ``key``) either way round, oldest first: the columns of
    :func:`core.store.judged.judges`, and ``flipped`` (that judge's A is this B)."""
    found = judges(store, list({a.job_id, b.job_id}), "pairwise")
    sides = [judge_sides(row) for row in found.itertuples()]
    mine = [side in ((a, b, key), (b, a, key)) for side in sides]
    flipped = [side[0] != a for side, match in zip(sides, mine, strict=True) if match]
    return found.loc[mine].assign(flipped=flipped)


@dataclass(frozen=True)
class JudgedPair:
    """A pairwise judge's verdicts on sides ``a`` and ``b`` paired on ``key``: its tally of
    A, B, tie and not graded, with ``a`` and ``b`` as the comparison that asks names them."""

    judge_job: str
    state: str
    a: Side
    b: Side
    key: str
    tally: PairwiseTally


def judged_pairs(store: Store, a: Side, b: Side, key: str) -> list[JudgedPair]:
    """The tallies of this comparison's pairwise judges, oldest first, each as A and B here
    name the sides (a judge started the other way round: its A and B exchanged). What
    Compare shows."""
    return [
        _judged(store, row, a, b, key, row.flipped)
        for row in pairwise_judges(store, a, b, key).itertuples()
    ]


def judged_slices(store: Store, job_id: str, field: str, key: str) -> list[JudgedPair]:
    """Every pairwise judge of two slices of ``job_id`` by ``field`` paired on ``key`` (an
    experiment's variants by item), oldest first, each with its sides as it was started:
    the tallies :func:`judged_pairs` gives for them. What the Experiments page shows."""
    found = []
    for row in judges(store, [job_id], "pairwise").itertuples():
        a, b, on = judge_sides(row)
        if a.job_id == b.job_id == job_id and a.field == field and on == key:
            found.append(_judged(store, row, a, b, key, flipped=False))
    return found


def _judged(store: Store, row: Any, a: Side, b: Side, key: str, flipped: bool) -> JudgedPair:
    tally = pairwise_tally(store, row.judge_job)
    return JudgedPair(
        row.judge_job, str(row.state), a, b, key, tally.flipped() if flipped else tally
    )
