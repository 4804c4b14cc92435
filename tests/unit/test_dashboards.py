"""Dashboards: cost comes from the one saved price table; latency from each request's own."""

import math

import pandas as pd

from core.plan.pricing import ModelPrice, PriceTable, cost_text
from core.store.dashboards import (
    NO_LATENCY,
    NO_PRICES,
    NO_RESULTS,
    Scope,
    cost_figure,
    latency_figure,
    summary_table,
    throughput_figure,
    token_distribution_figure,
    with_cost,
)
from core.store.db import Store
from tests.support.jobs import finished_job


def summary():
    return pd.DataFrame(
        [
            {"model": "tiny", "tokens_in": 2_000_000, "tokens_out": 1_000_000, "run_hours": 0.5},
            {"model": "other", "tokens_in": 1_000_000, "tokens_out": 0, "run_hours": None},
        ]
    )


def test_token_prices_and_gpu_hours_make_the_cost():
    prices = PriceTable(
        models={"tiny": ModelPrice(input_per_1m=0.5, output_per_1m=2.0, gpu_hour=4.0)}
    )
    costs = with_cost(summary(), prices)["cost"].tolist()
    assert costs[0] == 2_000_000 * 0.5 / 1e6 + 1_000_000 * 2.0 / 1e6 + 0.5 * 4.0
    assert math.isnan(costs[1])  # no price for "other": unknown, never free


def test_the_star_row_prices_models_not_listed():
    prices = PriceTable(models={"*": ModelPrice(input_per_1m=1.0, output_per_1m=1.0)})
    assert with_cost(summary(), prices)["cost"].tolist() == [3.0, 1.0]


def test_the_table_shows_cost_as_money_beside_the_group():
    prices = PriceTable(models={"tiny": ModelPrice(input_per_1m=1.0, output_per_1m=1.0)})
    shown = summary_table(with_cost(summary(), prices), "EUR")
    assert list(shown.columns)[:2] == ["model", "cost (EUR)"] and "cost" not in shown
    assert shown["cost (EUR)"].tolist() == [cost_text(3.0), cost_text(math.nan)]


def test_the_latency_chart_plots_each_requests_recorded_latency(tmp_path):
    job = finished_job(tmp_path, {"a": "x", "b": "y", "old": "z"}, {"a": 1500, "b": 2250})
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    fig = latency_figure(store, Scope(job_ids=[job.job_id]), by="model")
    assert sorted(x for trace in fig.data for x in trace.x) == [1.5, 2.25]  # "old" has none
    assert [trace.name for trace in fig.data] == ["tiny"]  # grouped as asked


def test_the_latency_chart_says_when_no_result_recorded_latency(tmp_path):
    job = finished_job(tmp_path, {"old": "z", "bad": None})
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    fig = latency_figure(store, Scope(job_ids=[job.job_id]))
    assert not fig.data and fig.layout.annotations[0].text == NO_LATENCY
    fig = latency_figure(store, Scope(job_ids=["no-such-job"]))
    assert fig.layout.annotations[0].text == NO_RESULTS


def test_a_cost_chart_without_prices_says_so_instead_of_plotting_zeros():
    unpriced = with_cost(summary(), PriceTable())
    fig = cost_figure(unpriced.assign(job="j"), "job")
    assert not fig.data and fig.layout.annotations[0].text == NO_PRICES
    priced = with_cost(summary(), PriceTable(models={"tiny": ModelPrice(input_per_1m=1.0)}))
    fig = cost_figure(priced.assign(job=["a", "b"]), "job", "EUR")
    assert list(fig.data[0].x) == ["a"] and "EUR" in fig.layout.title.text  # priced rows only


def test_a_short_jobs_throughput_is_a_bar_not_a_lone_dot(tmp_path):
    job = finished_job(tmp_path, {"a": "x", "b": "y"})
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    fig = throughput_figure(store, Scope(job_ids=[job.job_id]))
    assert fig.data[0].type == "bar" and list(fig.data[0].y) == [6]  # 3 tokens per answer


def test_the_tokens_per_request_facets_have_short_titles_and_room(tmp_path):
    """Issue 38, item 15: the facet titles ("tokens=tokens_in") overlapped at half width,
    the legend of long job names beside them."""
    job = finished_job(tmp_path, {"a": "x", "b": "y"})
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    fig = token_distribution_figure(store, Scope(job_ids=[job.job_id]))
    assert [a.text for a in fig.layout.annotations] == ["in (prompt)", "out (answer)"]
    assert fig.layout.legend.orientation == "h"  # under the chart, not eating its width
    assert fig.layout.xaxis.domain[1] + 0.05 < fig.layout.xaxis2.domain[0]  # apart
    assert fig.layout.xaxis2.matches is None  # each facet its own range
