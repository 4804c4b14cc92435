"""Plotly figures of jobs' results, each from one DuckDB aggregate (never a million rows).

Charts group by job, model, prompt version or day, and can be narrowed to jobs and dates.
Cost comes from the price table by the one pricing rule (``core.store.costs``, the one
Results and Upload & check's estimate use): per million tokens (hosted-API prices), else
per GPU hour of the time the engine ran; reused answers are priced as saved, not cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from core.plan.pricing import PriceTable, cost_text
from core.schemas import job_label
from core.store import checks
from core.store.costs import costs, usage
from core.store.db import Store
from core.store.review import wilson
from core.store.schema import JOB_LABEL_SQL

GROUPS: dict[str, str] = {
    "job": JOB_LABEL_SQL,  # the job's name and the end of its id
    "model": "r.model",
    "prompt_version": "coalesce(r.prompt_version, '(none)')",
    "day": "strftime(coalesce(r.created_at, j.created_at), '%Y-%m-%d')",
}
DISTRIBUTION_ROWS = 20_000  # a histogram of a reservoir sample this size keeps its shape


@dataclass
class Scope:
    """Which results a dashboard covers: jobs (all when empty) and a date range."""

    job_ids: list[str] = field(default_factory=list)
    start: date | None = None
    end: date | None = None


def _where(scope: Scope) -> tuple[str, list[Any]]:
    clauses, params = ["true"], []
    if scope.job_ids:
        clauses.append("list_contains(?, r.job_id)")
        params.append(list(scope.job_ids))
    when = "coalesce(r.created_at, j.created_at)"
    if scope.start:
        clauses.append(f"{when} >= ?")
        params.append(pd.Timestamp(scope.start, tz="UTC"))
    if scope.end:
        clauses.append(f"{when} < ?")
        params.append(pd.Timestamp(scope.end + timedelta(days=1), tz="UTC"))
    return " AND ".join(clauses), params


_FROM = "FROM results r LEFT JOIN jobs j ON j.job_id = r.job_id"


def result_models(store: Store) -> list[str]:
    """The models results were made by, sorted: what the price table prices, each under the
    name its answers carry (an adapter's own, not the job's list of models)."""
    found = store.query("SELECT DISTINCT model FROM results WHERE model IS NOT NULL ORDER BY 1")
    return list(found["model"])


def summary(store: Store, scope: Scope, by: str = "job") -> pd.DataFrame:
    """Per group: requests, successes, failures, rates and tokens."""
    if by not in GROUPS:
        raise ValueError(f"group by one of {', '.join(GROUPS)}")
    clause, params = _where(scope)
    return store.query(
        f"""
        SELECT *, succeeded / requests AS success_rate, failed / requests AS failure_rate
        FROM (
        SELECT {GROUPS[by]} AS "{by}", any_value(r.model) AS model,
               count(*) AS requests,
               count(*) FILTER (WHERE r.status = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE r.status = 'failed') AS failed,
               coalesce(sum(r.prompt_tokens), 0) AS tokens_in,
               coalesce(sum(r.completion_tokens), 0) AS tokens_out,
               -- answers given again, not computed (docs/reuse.md)
               count(r.reused_from) AS reused,
               coalesce(sum(r.prompt_tokens) FILTER (WHERE r.reused_from IS NOT NULL), 0)
                   AS reused_tokens_in,
               coalesce(sum(r.completion_tokens) FILTER (WHERE r.reused_from IS NOT NULL), 0)
                   AS reused_tokens_out
        {_FROM} WHERE {clause}
        GROUP BY 1
        ) ORDER BY 1
        """,
        params,
    )


def with_cost(
    index: Store, frame: pd.DataFrame, scope: Scope, by: str, prices: PriceTable
) -> pd.DataFrame:
    """Adds to a summary the hours its engines ran for it (``engine_hours``), its ``cost``
    and what reused answers saved (``cost_saved``), by the one pricing rule
    (``core.store.costs``); NaN: no price for its models (unknown, never free)."""
    clause, params = _where(scope)
    priced = costs(usage(index, GROUPS[by], f"WHERE {clause}", params), prices)
    out = frame.copy()
    out["engine_hours"] = out[by].map(priced["engine_seconds"]).astype(float) / 3600
    out["cost"] = out[by].map(priced["cost"]).astype(float)
    out["cost_saved"] = out[by].map(priced["cost_saved"]).astype(float)
    return out


def summary_table(frame: pd.DataFrame, currency: str) -> pd.DataFrame:
    """A summary as the page tables it: cost as money reads ("no price" where a model has
    none: ``core.plan.pricing``), beside the group, where a wide table cannot push it out of
    sight."""
    shown = frame.drop(columns=["cost", "cost_saved"], errors="ignore")
    shown.insert(1, f"cost ({currency})", frame["cost"].map(cost_text))
    if "cost_saved" in frame:  # by answers given again (docs/reuse.md)
        shown.insert(2, f"saved by reuse ({currency})", frame["cost_saved"].map(cost_text))
    return shown


NO_RESULTS = "no results in this scope"
NO_PRICES = "no price set for these models: set one in the price table above"
NO_LATENCY = "no latency recorded for these results (run before this version)"


def _empty(title: str, text: str = NO_RESULTS) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title=title,
        annotations=[{"text": text, "showarrow": False}],
        xaxis={"visible": False},
        yaxis={"visible": False},
    )
    return fig


def requests_figure(frame: pd.DataFrame, by: str) -> go.Figure:
    """Succeeded and failed requests per group, stacked."""
    if frame.empty:
        return _empty("Requests")
    long = frame.melt(id_vars=[by], value_vars=["succeeded", "failed"], var_name="status")
    return px.bar(long, x=by, y="value", color="status", title="Requests", barmode="stack")


def rates_figure(frame: pd.DataFrame, by: str) -> go.Figure:
    if frame.empty:
        return _empty("Success and failure rates")
    long = frame.melt(id_vars=[by], value_vars=["success_rate", "failure_rate"], var_name="rate")
    fig = px.bar(long, x=by, y="value", color="rate", barmode="group", title="Rates")
    fig.update_yaxes(tickformat=".0%", range=[0, 1])
    return fig


def tokens_figure(frame: pd.DataFrame, by: str) -> go.Figure:
    if frame.empty:
        return _empty("Tokens")
    long = frame.melt(id_vars=[by], value_vars=["tokens_in", "tokens_out"], var_name="tokens")
    return px.bar(long, x=by, y="value", color="tokens", barmode="group", title="Tokens in/out")


def cost_figure(frame: pd.DataFrame, by: str, currency: str = "USD") -> go.Figure:
    if frame.empty or "cost" not in frame:
        return _empty("Cost")
    priced = frame[frame["cost"].notna()]
    if priced.empty:
        return _empty("Cost", NO_PRICES)
    return px.bar(priced, x=by, y="cost", title=f"Cost ({currency}, from the price table)")


def finish_reasons_figure(store: Store, scope: Scope, by: str = "job") -> go.Figure:
    clause, params = _where(scope)
    frame = store.query(
        # A vector has no finish reason; only a failure has no result at all.
        f"""SELECT {GROUPS[by]} AS "{by}",
                   CASE WHEN r.status = 'failed' THEN '(failed)'
                        ELSE coalesce(r.finish_reason, '(vectors)') END AS reason,
                   count(*) AS n {_FROM} WHERE {clause} GROUP BY 1, 2 ORDER BY 1, 2""",
        params,
    )
    if frame.empty:
        return _empty("Finish reasons")
    return px.bar(frame, x=by, y="n", color="reason", title="Finish reasons", barmode="stack")


def token_distribution_figure(store: Store, scope: Scope, by: str = "job") -> go.Figure:
    """Histograms of tokens out (and in) per request; a reservoir sample past 20k rows."""
    clause, params = _where(scope)
    frame = store.query(
        f"""SELECT {GROUPS[by]} AS "{by}", r.prompt_tokens AS tokens_in,
                   r.completion_tokens AS tokens_out
            {_FROM} WHERE {clause} AND r.status = 'succeeded'
            USING SAMPLE reservoir({DISTRIBUTION_ROWS} ROWS) REPEATABLE (1)""",
        params,
    )
    if frame.empty:
        return _empty("Tokens per request")
    # Short facet titles, each facet its own x range, and the legend (long job names) under
    # the chart: at half the page's width the titles overlapped (issue 38, item 15).
    long = frame.rename(columns={"tokens_in": "in (prompt)", "tokens_out": "out (answer)"}).melt(
        id_vars=[by], value_vars=["in (prompt)", "out (answer)"], var_name="tokens"
    )
    fig = px.histogram(
        long,
        x="value",
        color=by,
        facet_col="tokens",
        facet_col_spacing=0.08,
        barmode="overlay",
        opacity=0.6,
        title="Tokens per request",
        nbins=40,
        labels={"value": "tokens"},
    )
    fig.for_each_annotation(lambda a: a.update(text=a.text.removeprefix("tokens=")))
    fig.update_xaxes(matches=None)
    fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.25, "x": 0})
    return fig


def throughput_figure(store: Store, scope: Scope) -> go.Figure:
    """Output tokens and requests per minute over time, per job (from the answers' times).
    Only the answers a job's engine computed: a reused answer keeps the time its original
    was made, before the job existed, and took none of the job's time."""
    clause, params = _where(scope)
    frame = store.query(
        # The minute from the epoch, not date_trunc: that goes through the time zone for
        # each row (10x slower at a million); the same minute in any whole-minute zone.
        f"""SELECT {JOB_LABEL_SQL} AS job,
                   to_timestamp(60 * (epoch_ms(r.created_at) // 60000)) AS minute,
                   sum(r.completion_tokens) AS tokens_out, count(*) AS requests
            {_FROM} WHERE {clause} AND r.created_at IS NOT NULL AND r.reused_from IS NULL
            GROUP BY 1, 2 ORDER BY 2""",
        params,
    )
    if frame.empty:
        return _empty("Throughput")
    if frame["minute"].nunique() < 3:  # a short job: one dot on a millisecond axis says nothing
        per_job = frame.groupby("job", as_index=False)[["tokens_out", "requests"]].sum()
        return px.bar(
            per_job,
            x="job",
            y="tokens_out",
            title="Output tokens (the jobs ran for under three minutes)",
        )
    return px.line(
        frame,
        x="minute",
        y="tokens_out",
        color="job",
        markers=True,
        title="Throughput (output tokens per minute)",
    )


def latency_figure(store: Store, scope: Scope, by: str = "job") -> go.Figure:
    """Histogram of per-request latency (``latency_ms``: entering the engine to the final
    output) per group; a reservoir sample past 20k rows. Results written before the engine
    recorded latency have none and are left out; if none has it, the chart says so."""
    clause, params = _where(scope)
    frame = store.query(
        f"""SELECT {GROUPS[by]} AS "{by}", r.latency_ms / 1000 AS seconds
            {_FROM} WHERE {clause} AND r.latency_ms IS NOT NULL
            USING SAMPLE reservoir({DISTRIBUTION_ROWS} ROWS) REPEATABLE (1)""",
        params,
    )
    if frame.empty:
        has_results = not store.query(f"SELECT 1 {_FROM} WHERE {clause} LIMIT 1", params).empty
        return _empty("Latency per request", NO_LATENCY if has_results else NO_RESULTS)
    return px.histogram(
        frame,
        x="seconds",
        color=by,
        nbins=40,
        barmode="overlay",
        opacity=0.6,
        title="Latency per request (seconds in the engine)",
    )


def pass_rate_figure(store: Store, scope: Scope, by: str = "job") -> go.Figure:
    """Review pass rate per group with its 95% Wilson interval."""
    clause, params = _where(scope)
    frame = store.query(
        f"""SELECT {GROUPS[by]} AS "{by}",
                   count(*) FILTER (WHERE v.verdict = 'pass') AS passed,
                   count(*) FILTER (WHERE v.verdict = 'fail') AS failed,
                   count(*) FILTER (WHERE v.verdict = 'unsure') AS unsure,
                   count(*) FILTER (WHERE v.verdict NOT IN ('pass', 'fail', 'unsure'))
                       AS own_labels
            FROM reviews v JOIN results r ON r.job_id = v.job_id AND r.custom_id = v.custom_id
            LEFT JOIN jobs j ON j.job_id = r.job_id
            WHERE {clause} GROUP BY 1 HAVING passed + failed > 0 ORDER BY 1""",
        params,
    )
    if frame.empty:
        return _empty("Review pass rate")
    n = frame["passed"] + frame["failed"]
    frame["pass_rate"] = frame["passed"] / n
    bounds = [wilson(int(p), int(k)) for p, k in zip(frame["passed"], n, strict=True)]
    frame["err_low"] = frame["pass_rate"] - [b[0] for b in bounds]
    frame["err_high"] = [b[1] for b in bounds] - frame["pass_rate"]
    fig = px.bar(
        frame,
        x=by,
        y="pass_rate",
        error_y="err_high",
        error_y_minus="err_low",
        title="Review pass rate (95% CI)",
        hover_data=["passed", "failed", "unsure", "own_labels"],  # own: reviewers' labels
    )
    fig.update_yaxes(tickformat=".0%", range=[0, 1])
    return fig


NO_CHECKS = "no checks have run on these jobs (see the Checks page)"


def checks_figure(store: Store, scope: Scope, by: str = "job") -> go.Figure:
    """Each rule's pass rate (from the Checks page or ``core grade``) per group, with its 95%
    Wilson interval. Grouped by day, it shows them per job; dates pick the jobs started
    within them."""
    clauses, params = ["true"], []
    if scope.job_ids:
        clauses.append("list_contains(?, job_id)")
        params.append(list(scope.job_ids))
    if scope.start:
        clauses.append("created_at >= ?")
        params.append(pd.Timestamp(scope.start, tz="UTC"))
    if scope.end:
        clauses.append("created_at < ?")
        params.append(pd.Timestamp(scope.end + timedelta(days=1), tz="UTC"))
    ids = store.query(
        f"SELECT job_id, coalesce(name, '') AS name FROM jobs WHERE {' AND '.join(clauses)}",
        params,
    )
    group = by if by in checks.GROUPS else "job"
    frame = checks.pass_rates(store, list(ids["job_id"]), group)
    frame = frame[frame["pass_rate"].notna()]
    if frame.empty:
        return _empty("Checks: pass rate per rule", NO_CHECKS)
    if group == "job":
        names = dict(zip(ids["job_id"], ids["name"], strict=True))
        frame = frame.assign(job=[job_label(j, names.get(j, "")) for j in frame["job"]])
    frame = frame.assign(
        err_low=frame["pass_rate"] - frame["ci_low"],
        err_high=frame["ci_high"] - frame["pass_rate"],
    )
    fig = px.bar(
        frame,
        x=group,
        y="pass_rate",
        color="rule",
        barmode="group",
        error_y="err_high",
        error_y_minus="err_low",
        title="Checks: pass rate per rule (95% CI)",
        hover_data=["passed", "failed", "not_graded"],
    )
    fig.update_yaxes(tickformat=".0%", range=[0, 1])
    return fig


class KeptFigure(go.Figure):
    """A figure made once and drawn on many reruns: the dict that ``st.plotly_chart`` sends
    (numbers packed as base64, a few hundredths of a second a chart) is made once here."""

    def __init__(self, figure: go.Figure) -> None:
        super().__init__(figure)
        self._kept = super().to_dict()

    def to_dict(self) -> dict:
        return self._kept


def figure_html(fig: go.Figure) -> str:
    """A standalone HTML file of a figure (plotly.js inlined: opens offline)."""
    return fig.to_html(include_plotlyjs=True, full_html=True)


FIRST_FIGURE = "requests"  # the figure shown, and offered for download, first


def every_figure(
    index: Store, frame: pd.DataFrame, scope: Scope, by: str, priced: PriceTable
) -> dict[str, go.Figure]:
    """Every figure of a summary, by name, in the order the page shows them."""
    return {
        FIRST_FIGURE: requests_figure(frame, by),
        "rates": rates_figure(frame, by),
        "finish_reasons": finish_reasons_figure(index, scope, by),
        "tokens": tokens_figure(frame, by),
        "token_distribution": token_distribution_figure(index, scope, by),
        "cost": cost_figure(frame, by, priced.currency),
        "throughput": throughput_figure(index, scope),
        "latency": latency_figure(index, scope, by),
        "pass_rate": pass_rate_figure(index, scope, by),
        "checks": checks_figure(index, scope, by),
    }


def summary_and_figures(
    index: Store, scope: Scope, by: str, priced: PriceTable
) -> tuple[pd.DataFrame, dict[str, KeptFigure]]:
    """The summary (with cost) of a scope and grouping, and every figure of it (none when
    it has no results), each kept made: it is drawn on every rerun until the index changes."""
    frame = with_cost(index, summary(index, scope, by), scope, by, priced)
    if frame.empty:
        return frame, {}
    return frame, {
        name: KeptFigure(fig) for name, fig in every_figure(index, frame, scope, by, priced).items()
    }
