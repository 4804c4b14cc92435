"""What the Experiments page shows of one graded experiment: a summary row per variant,
the views of the matrix, and each variant against a chosen baseline, said in words.

A variant is one (prompt, provider) cell of the plan; an item is one test. Every figure
is counted from :func:`core.experiments.runs.matrix` (the job's output and error files and
``grades.json``), so the summary equals a recount from those files. A failed request has no
answer: it counts under ``failed``, never as a pass or a fail of a check. The statistics are
:mod:`core.experiments.stats`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel

from core.config import data_paths
from core.experiments import stats
from core.experiments.config import Plan
from core.experiments.runs import (
    check_names,
    custom_id,
    item_id,
    list_experiments,
    matrix,
    read_grades,
    read_state,
    requests_of,
    same_file,
    variant_id,
)
from core.jobs.folder import JobFolder
from core.plan.pricing import PriceTable, Usage, load_prices, usage_cost
from core.store import compare as cmp
from core.store.db import Store
from core.store.results import conversation
from core.store.review import verdicts_of

EVERY_CHECK = "every check"
ALL, FAILURES, DIFFERENT = "All", "Failures", "Different"
CHECK_VIEW = "Fails "  # a per-check view: "Fails <check>"
MARKS = {True: "✓", False: "✗", None: "–"}  # passed, failed, not graded


@dataclass
class Experiment:
    """One experiment's cells (``runs.matrix`` with its details), read once per page run."""

    experiment_id: str
    name: str
    frame: pd.DataFrame
    variants: list[str]  # labels, by the variant's index in the plan's cells
    items: list[str]  # the tests' labels, by index
    item_checks: list[list[str]]  # each test's checks
    checks: list[str] = field(default_factory=list)  # every check, in order
    variables: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)  # each variant's model (for prices)
    cells: pd.DataFrame | None = None  # :func:`cell_table`, made at its first call
    job_id: str | None = None  # the job the answers are results of (Review labels them)
    plan_cells: list[tuple[int, int]] = field(default_factory=list)  # (prompt, provider)


def variant_labels(prompts: list[str], providers: list[str]) -> list[str]:
    """Each variant's name: its prompt and provider, or only the one that varies; made
    unique."""
    one_prompt, one_provider = len(set(prompts)) == 1, len(set(providers)) == 1
    labels: list[str] = []
    for prompt, provider in zip(prompts, providers, strict=True):
        label = provider if one_prompt and not one_provider else prompt
        if not one_prompt and not one_provider:
            label = f"{prompt} · {provider}"
        unique, n = label, 2
        while unique in labels:
            unique, n = f"{label} ({n})", n + 1
        labels.append(unique)
    return labels


def plan_variants(plan: Plan) -> list[str]:
    """The labels of a plan's variants, by the variant's index in its cells."""
    prompts = [plan.prompts[p].name for p, _ in plan.cells]
    providers = [plan.providers[m].name for _, m in plan.cells]
    return variant_labels(prompts, providers)


def variants_of_job(job_id: str, home: Path | None = None) -> dict[str, str]:
    """The variants of the experiment that ran as ``job_id``, each by its part of the
    custom_ids (Compare's slice value, ``p0.m1``) with its label; empty for a job that no
    experiment ran as."""
    for state in list_experiments(home):
        if state.job_id == job_id:
            labels = plan_variants(state.plan)
            return {
                variant_id(p, m): label
                for (p, m), label in zip(state.plan.cells, labels, strict=True)
            }
    return {}


def load(experiment_id: str, home: Path | None = None) -> Experiment:
    """The experiment's cells as its files hold them now."""
    home = home or data_paths().home
    state = read_state(experiment_id, home)
    plan = state.plan
    frame = matrix(experiment_id, home, details=True)
    item_checks = [check_names(plan, test) for test in plan.tests]
    models = []
    for v, (_, m) in enumerate(plan.cells):
        answered = frame.loc[frame["_variant"] == v, "_model"].dropna() if len(frame) else []
        models.append(
            str(answered.iloc[0]) if len(answered) else Path(plan.providers[m].folder).name
        )
    return Experiment(
        experiment_id=experiment_id,
        name=plan.name,
        frame=frame,
        variants=plan_variants(plan),
        items=[t.description or str(i + 1) for i, t in enumerate(plan.tests)],
        item_checks=item_checks,
        checks=list(dict.fromkeys(c for names in item_checks for c in names)),
        variables=plan.variables(),
        models=models,
        job_id=state.job_id,
        plan_cells=list(plan.cells),
    )


def prepared(experiment_id: str, home: Path | None = None) -> Experiment:
    """:func:`load` with its cells made (:func:`cell_table`): an experiment a page keeps
    and every session reads, never changes after."""
    exp = load(experiment_id, home)
    cell_table(exp)
    return exp


# -- per cell ------------------------------------------------------------------------------


def result_of(exp: Experiment, item: int, variant: int) -> tuple[str, str]:
    """The (job id, custom_id) of one cell: the result Review's labels are kept for."""
    prompt, provider = exp.plan_cells[variant]
    return str(exp.job_id), custom_id(item, prompt, provider)


def comparison_of(exp: Experiment, a: int, b: int) -> tuple[str, cmp.Side, cmp.Side]:
    """Compare's comparison of two variants of an experiment: its id (under which Compare
    tallies their preferences and exports them for DPO) and its sides, slices of the
    experiment's one job by variant paired by item: what Compare opens on them."""
    side_a, side_b = (
        cmp.Side(str(exp.job_id), cmp.VARIANT, variant_id(*exp.plan_cells[v])) for v in (a, b)
    )
    return cmp.comparison_id(side_a, side_b, cmp.ITEM), side_a, side_b


def judged_variants(store: Store, exp: Experiment) -> list[tuple[str, str, cmp.JudgedPair]]:
    """The pairwise judges of two of the experiment's variants (started on Compare's two
    slices by variant, paired by item), oldest first: each judge's sides A and B as variant
    labels, and its tally (:func:`core.store.compare.judged_slices`, Compare's numbers)."""
    cells = zip(exp.plan_cells, exp.variants, strict=True)
    names = {variant_id(*cell): name for cell, name in cells}
    return [
        (names[judged.a.value], names[judged.b.value], judged)
        for judged in cmp.judged_slices(store, str(exp.job_id), cmp.VARIANT, cmp.ITEM)
        if judged.a.value in names and judged.b.value in names
    ]


def prefer(
    store: Store, exp: Experiment, item: int, a: int, b: int, reviewer: str, choice: str
) -> str:
    """A reviewer's preference between two variants' answers to one item, kept as Compare
    keeps one (:func:`core.store.compare.save_preference`, the latest choice wins); returns
    the comparison's id.

    Raises:
        core.store.compare.CompareError: no reviewer name, an unknown choice, or the same
            variant twice.
    """
    if a == b:
        raise cmp.CompareError("choose two different variants")
    comparison, side_a, side_b = comparison_of(exp, a, b)
    pair = {"custom_id_a": result_of(exp, item, a)[1], "custom_id_b": result_of(exp, item, b)[1]}
    cmp.save_preference(store, comparison, _pair_key(item), reviewer, choice, pair, side_a, side_b)
    return comparison


def preferred(
    store: Store, exp: Experiment, item: int, a: int, b: int, reviewer: str
) -> tuple[str | None, dict[str, int]]:
    """The reviewer's choice between two variants on one item (None: none yet) and the
    tally of A / B / tie over every item and reviewer of those two variants."""
    comparison = comparison_of(exp, a, b)[0]
    mine = cmp.preference_of(store, comparison, _pair_key(item), reviewer) if reviewer else None
    return mine, cmp.preference_tally(store, comparison)


def _pair_key(item: int) -> str:
    return item_id(item)  # the key Compare pairs the item's two answers on


class Turns(BaseModel):
    """One conversation an item was sent as, and the answers of the variants that sent it
    (variants differing only in provider send the same one)."""

    conversation: list[tuple[str, str]]  # (role, text)
    answers: list[tuple[str, str]]  # (variant, :func:`cell_text`)
    labels: list[list[str]] = []  # each answer's Review labels, "reviewer: verdict"


def item_turns(
    exp: Experiment, item: int, home: Path | None = None, store: Store | None = None
) -> list[Turns]:
    """An item's requests, as its job's input file holds them, beside every variant's
    answer (with its Review labels from ``store``'s index): one entry per distinct
    conversation, in the variants' order."""
    home = home or data_paths().home
    cids = [result_of(exp, item, v)[1] for v in range(len(exp.variants))]
    sent = requests_of(JobFolder(home / "jobs" / str(exp.job_id)), cids)
    labels = verdicts_of(store, str(exp.job_id), cids) if store is not None else {}
    rows = exp.frame[exp.frame["_item"] == item].to_dict("records") if len(exp.frame) else []
    shown: dict[str, Turns] = {}
    for row in rows:
        v = int(row["_variant"])
        turns = conversation(sent.get(cids[v]))
        key = repr(turns)
        if key not in shown:
            shown[key] = Turns(conversation=turns, answers=[])
        shown[key].answers.append((exp.variants[v], cell_text(exp, row)))
        shown[key].labels.append(labels.get(cids[v], []))
    return list(shown.values())


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _outcome(row: pd.Series, check: str) -> bool | None:
    value = row.get(check)
    return bool(value) if _known(value) else None


def cell_table(exp: Experiment) -> pd.DataFrame:
    """Per cell (item x variant): ``pass`` (every graded check held), ``score`` (the share
    of its graded checks that held) and each check's outcome; None where not graded (a
    failed request, a model-graded assertion, or a check the item does not have). Made
    once per :class:`Experiment`, column by column (a row loop takes seconds at 6,000)."""
    if exp.cells is not None:
        return exp.cells
    frame = exp.frame
    items = frame["_item"].to_numpy(int) if len(frame) else np.zeros(0, int)
    answered = frame["output"].notna().to_numpy() if len(frame) else np.zeros(0, bool)
    graded_n, passed_n = np.zeros(len(frame), int), np.zeros(len(frame), int)
    table: dict[str, Any] = {
        "item": items,
        "variant": frame["_variant"].to_numpy(int) if len(frame) else items,
        "answered": answered,
    }
    checks = {}
    for c in exp.checks:
        own = np.array([c in names for names in exp.item_checks], bool)[items]
        values = frame[c].to_numpy(object) if c in frame else np.full(len(frame), None)
        known = np.array([_known(v) for v in values], bool) & own & answered
        passed = known & np.array([bool(v) if _known(v) else False for v in values], bool)
        graded_n += known
        passed_n += passed
        checks[f"check {c}"] = np.where(known, passed, None)
    table["pass"] = np.where(answered & (graded_n > 0), graded_n == passed_n, None)
    table["score"] = np.where(graded_n > 0, passed_n / np.maximum(graded_n, 1), np.nan)
    exp.cells = pd.DataFrame({**table, **checks})
    return exp.cells


# -- the summary rows ----------------------------------------------------------------------


class Rate(BaseModel):
    """Passes out of graded answers, with the Wilson 95 % interval."""

    passed: int
    graded: int
    rate: float | None
    low: float | None
    high: float | None


def rate_of(outcomes: list[bool | None]) -> Rate:
    graded = [o for o in outcomes if o is not None]
    passed = sum(graded)
    low, high = stats.wilson(passed, len(graded))
    known = bool(graded)
    return Rate(
        passed=passed,
        graded=len(graded),
        rate=passed / len(graded) if known else None,
        low=low if known else None,
        high=high if known else None,
    )


class VariantSummary(BaseModel):
    """One variant's summary row."""

    variant: str
    model: str
    items: int
    answered: int
    failed: int  # requests without an answer (failed, or not run yet)
    every_check: Rate
    checks: dict[str, Rate]
    mean_score: float | None
    prompt_tokens: int
    completion_tokens: int
    cost: float | None  # what the answers cost at the price table's price; None: no price
    cost_per_1000: float | None  # per 1,000 answered items
    latency_p50_ms: float | None
    latency_p95_ms: float | None


def summary(exp: Experiment, prices: PriceTable | None = None) -> list[VariantSummary]:
    """A summary row per variant, priced by the studio's one pricing rule
    (:func:`core.plan.pricing.usage_cost`; a GPU-hour price needs engine time per
    variant, which one shared job does not split: no price then)."""
    prices = prices if prices is not None else load_prices()
    cells = cell_table(exp)
    out = []
    for v, label in enumerate(exp.variants):
        rows = exp.frame[exp.frame["_variant"] == v] if len(exp.frame) else exp.frame
        mine = cells[cells["variant"] == v] if len(cells) else cells
        answered = rows[rows["output"].notna()] if len(rows) else rows
        computed = answered[~answered["_reused"].fillna(False).astype(bool)] if len(rows) else rows
        reused = answered[answered["_reused"].fillna(False).astype(bool)] if len(rows) else rows

        def tokens(frame: pd.DataFrame, column: str) -> int:
            return (
                int(pd.to_numeric(frame[column], errors="coerce").fillna(0).sum())
                if len(frame)
                else 0
            )

        usage = Usage(
            computed=len(computed),
            prompt_tokens=tokens(computed, "_prompt_tokens"),
            completion_tokens=tokens(computed, "_completion_tokens"),
            reused=len(reused),
            reused_prompt_tokens=tokens(reused, "_prompt_tokens"),
            reused_completion_tokens=tokens(reused, "_completion_tokens"),
        )
        cost = usage_cost(prices, exp.models[v], usage).spent
        latencies = (
            list(pd.to_numeric(computed["_latency_ms"], errors="coerce")) if len(rows) else []
        )
        scores = mine["score"].dropna() if len(mine) else pd.Series([], dtype=float)
        out.append(
            VariantSummary(
                variant=label,
                model=exp.models[v],
                items=len(rows),
                answered=len(answered),
                failed=len(rows) - len(answered),
                every_check=rate_of(list(mine["pass"]) if len(mine) else []),
                checks={
                    c: rate_of(list(mine[f"check {c}"]) if len(mine) else []) for c in exp.checks
                },
                mean_score=float(scores.mean()) if len(scores) else None,
                prompt_tokens=tokens(answered, "_prompt_tokens"),
                completion_tokens=tokens(answered, "_completion_tokens"),
                cost=cost,
                cost_per_1000=cost / len(answered) * 1000
                if cost is not None and len(answered)
                else None,
                latency_p50_ms=stats.percentile(latencies, 50),
                latency_p95_ms=stats.percentile(latencies, 95),
            )
        )
    return out


def rate_text(rate: Rate) -> str:
    """``72.5 % (61.0–81.6) of 40``, or ``not graded``."""
    if rate.rate is None:
        return "not graded"
    return f"{rate.rate * 100:.1f} % ({rate.low * 100:.1f}–{rate.high * 100:.1f}) of {rate.graded}"


def summary_table(rows: list[VariantSummary], money: Any = None) -> pd.DataFrame:
    """The summary rows as the page shows them (``money``: how an amount reads)."""
    money = money or (lambda amount: "no price" if amount is None else f"{amount:.4g}")
    table = []
    for row in rows:
        line: dict[str, Any] = {
            "variant": row.variant,
            "model": row.model,
            "answered": f"{row.answered} of {row.items}",
            f"pass ({EVERY_CHECK}, 95 % interval)": rate_text(row.every_check),
        }
        line.update({f"pass: {c}": rate_text(r) for c, r in row.checks.items()})
        line.update(
            {
                "mean score": None if row.mean_score is None else round(row.mean_score, 3),
                "prompt tokens": row.prompt_tokens,
                "completion tokens": row.completion_tokens,
                "cost per 1,000 items": money(row.cost_per_1000),
                "latency p50 (ms)": row.latency_p50_ms,
                "latency p95 (ms)": row.latency_p95_ms,
            }
        )
        table.append(line)
    return pd.DataFrame(table)


# -- the views -----------------------------------------------------------------------------


def views(exp: Experiment) -> list[str]:
    """All, Failures, Different, then one view per check."""
    return [ALL, FAILURES, DIFFERENT, *(f"{CHECK_VIEW}{c}" for c in exp.checks)]


def view_items(exp: Experiment, view: str) -> list[int]:
    """The items a view shows. Failures: some variant failed a check or its request.
    Different: the variants disagree (one passes every check, another does not, a failed
    request counting as not passing). Fails <check>: some variant failed that check."""
    cells = cell_table(exp)
    if view == ALL or cells.empty:
        return list(range(len(exp.items)))
    if view == FAILURES:
        shown = cells.loc[cells["pass"].map(lambda p: p is False) | ~cells["answered"], "item"]
    elif view == DIFFERENT:
        passes = cells.assign(ok=cells["pass"].map(lambda p: p is True))
        counts = passes.groupby("item")["ok"].nunique()
        shown = counts.index[counts > 1].to_series()
    elif view.startswith(CHECK_VIEW) and view[len(CHECK_VIEW) :] in exp.checks:
        column = f"check {view[len(CHECK_VIEW) :]}"
        shown = cells.loc[cells[column].map(lambda o: o is False), "item"]
    else:
        raise ValueError(f"no view {view!r}")
    return sorted({int(i) for i in shown})


def cell_text(exp: Experiment, row: dict[str, Any]) -> str:
    """One cell (a row of the matrix) as plain text: the answer, each of the item's checks
    marked, tokens and latency."""
    answered = _known(row["output"])
    if answered:
        answer = str(row["output"])
    else:
        error = row["_error"]
        answer = f"(request failed: {error})" if _known(error) else "(no answer yet)"
    own = exp.item_checks[int(row["_item"])]
    marks = "  ".join(f"{MARKS[_outcome(row, c) if answered else None]} {c}" for c in own)
    figures = []
    if _known(row["_completion_tokens"]):
        figures.append(f"{int(row['_completion_tokens'])} tokens")
    if _known(row["_latency_ms"]):
        figures.append(f"{int(row['_latency_ms'])} ms")
    return "\n".join(part for part in (answer, marks, " · ".join(figures)) if part)


def wide(exp: Experiment, items: list[int]) -> pd.DataFrame:
    """The matrix: a row per item (its label and variables), a column per variant, each
    cell :func:`cell_text`."""
    variables = {v: f"var {v}" if v == "item" else v for v in exp.variables}
    taken = {"item", *variables.values()}
    columns = []
    for label in exp.variants:
        name = label if label not in taken else f"{label} (variant)"
        taken.add(name)
        columns.append(name)
    rows: dict[int, dict[str, Any]] = {}
    for item in items:
        rows[item] = {"item": exp.items[item]}
    for cell in exp.frame.to_dict("records"):
        row = rows.get(int(cell["_item"]))
        if row is None:
            continue  # not in this view
        if len(row) == 1:  # the item's variables, from its first cell
            for v, name in variables.items():
                key = f"var {v}" if v in ("test", "prompt", "provider", "output", "pass") else v
                row[name] = str(cell[key]) if _known(cell.get(key)) else None
        row[columns[int(cell["_variant"])]] = cell_text(exp, cell)
    return pd.DataFrame(list(rows.values()), columns=["item", *variables.values(), *columns])


# -- against a baseline --------------------------------------------------------------------


class Verdict(BaseModel):
    """One variant against the baseline on one measure (a check, every check, or the
    mean score)."""

    variant: str
    baseline: str
    measure: str
    items: int  # the items both have graded
    baseline_value: float | None
    value: float | None
    delta: float | None  # points (pass rates) or score units
    p: float
    significant: bool
    text: str


def _pass_verdict(base: str, other: str, measure: str, a: pd.Series, b: pd.Series) -> Verdict:
    both = a.notna() & b.notna()
    a, b = a[both].astype(bool), b[both].astype(bool)
    n = len(a)
    p = stats.mcnemar_exact(int((a & ~b).sum()), int((~a & b).sum()))
    rate_a, rate_b = (a.mean() * 100, b.mean() * 100) if n else (None, None)
    delta = rate_b - rate_a if n else None
    what = EVERY_CHECK if measure == EVERY_CHECK else f"'{measure}'"
    significant = n > 0 and p < stats.ALPHA and delta != 0
    if significant:
        more = "more" if delta > 0 else "less"
        text = (f"{other} passes {what} {abs(delta):.1f} points {more} often than {base} "
                f"({stats.p_text(p)})")  # fmt: skip
    else:
        text = f"{other} against {base} on {what}: no significant difference on {n} items"
    return Verdict(variant=other, baseline=base, measure=measure, items=n, baseline_value=rate_a,
                   value=rate_b, delta=delta, p=p, significant=significant, text=text)  # fmt: skip


def _score_verdict(base: str, other: str, a: pd.Series, b: pd.Series) -> Verdict:
    boot = stats.paired_bootstrap(a.to_numpy(float), b.to_numpy(float))
    keep = a.notna() & b.notna()
    significant = boot.n > 0 and boot.p < stats.ALPHA and boot.difference != 0
    if significant:
        way = "higher" if boot.difference > 0 else "lower"
        text = (f"{other}'s mean score is {abs(boot.difference):.3f} {way} than {base}'s "
                f"({stats.p_text(boot.p)})")  # fmt: skip
    else:
        text = f"{other} against {base} on mean score: no significant difference on {boot.n} items"
    return Verdict(variant=other, baseline=base, measure="mean score", items=boot.n,
                   baseline_value=float(a[keep].mean()) if boot.n else None,
                   value=float(b[keep].mean()) if boot.n else None,
                   delta=boot.difference if boot.n else None, p=boot.p,
                   significant=significant, text=text)  # fmt: skip


def against(exp: Experiment, baseline: int) -> list[Verdict]:
    """Every other variant against the baseline: every check and each check (McNemar's
    exact test on the items both graded), and the mean score (a paired bootstrap)."""
    cells = cell_table(exp)
    if cells.empty:
        return []
    columns = ["pass", "score", *(f"check {c}" for c in exp.checks)]
    by_variant = {v: g.set_index("item")[columns] for v, g in cells.groupby("variant")}
    base = by_variant.get(baseline)
    out: list[Verdict] = []
    if base is None:
        return out
    for v, other in by_variant.items():
        if v == baseline:
            continue
        a, b = base.align(other, join="inner", axis=0)
        names = (exp.variants[baseline], exp.variants[v])
        out.append(_pass_verdict(*names, EVERY_CHECK, a["pass"], b["pass"]))
        out += [_pass_verdict(*names, c, a[f"check {c}"], b[f"check {c}"]) for c in exp.checks]
        out.append(_score_verdict(*names, a["score"], b["score"]))
    return out


def verdict_table(verdicts: list[Verdict]) -> pd.DataFrame:
    """The deltas as a table: variant, measure, baseline, value, delta, p, items."""
    return pd.DataFrame(
        [
            {
                "variant": v.variant,
                "measure": v.measure,
                "baseline": None if v.baseline_value is None else round(v.baseline_value, 3),
                "this variant": None if v.value is None else round(v.value, 3),
                "delta": None if v.delta is None else round(v.delta, 3),
                "p": float(np.round(v.p, 4)),
                "items": v.items,
            }
            for v in verdicts
        ]
    )


# -- across reruns -------------------------------------------------------------------------


def trend(experiment_id: str, home: Path | None = None) -> pd.DataFrame:
    """Each graded run of the same file (the same source path and name), the oldest
    first: a row per run, a column per variant label, the pass rate on every check (%).
    Empty when the file ran once."""
    home = home or data_paths().home
    state = read_state(experiment_id, home)
    runs = same_file(state, list(reversed(list_experiments(home))))
    if len(runs) < 2:
        return pd.DataFrame()
    rows = []
    for run in runs:
        if read_grades(run.experiment_id, home) is None:
            continue  # not graded yet: nothing to say of it
        exp = load(run.experiment_id, home)
        row: dict[str, Any] = {"run": run.experiment_id, "created": run.created_at}
        for summary_row in summary(exp, PriceTable()):
            rate = summary_row.every_check.rate
            row[summary_row.variant] = None if rate is None else round(rate * 100, 1)
        rows.append(row)
    return pd.DataFrame(rows) if len(rows) > 1 else pd.DataFrame()
