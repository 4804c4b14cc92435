"""Dashboards: cost comes from the one saved price table; latency from each request's own."""

import math

import pandas as pd
import pytest

from core.plan.pricing import Cost, ModelPrice, PriceTable, Usage, cost_text, usage_cost
from core.store.dashboards import (
    NO_LATENCY,
    NO_PRICES,
    NO_RESULTS,
    Scope,
    cost_figure,
    latency_figure,
    summary,
    summary_table,
    throughput_figure,
    token_distribution_figure,
    with_cost,
)
from core.store.db import Store
from tests.support.jobs import finished_job, reused_rerun, set_job_seconds


def priced_jobs(tmp_path) -> tuple[Store, Scope]:
    """A job of the model tiny whose engine ran half an hour, and one of the model other
    that ran a quarter (5 prompt and 3 output tokens an answer), indexed."""
    tiny = finished_job(tmp_path / "t", {"a": "x", "b": "y"})
    other = finished_job(tmp_path / "o", {"c": "z"}, model="other")
    set_job_seconds(tiny, 1800.0)
    set_job_seconds(other, 900.0)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(tiny)
    store.ingest(other)
    return store, Scope(job_ids=[tiny.job_id, other.job_id])


def costed(store: Store, scope: Scope, prices: PriceTable, by: str = "model") -> pd.DataFrame:
    return with_cost(store, summary(store, scope, by), scope, by, prices)


def test_a_token_price_prices_the_tokens_else_a_gpu_hour_the_engines_time(tmp_path):
    store, scope = priced_jobs(tmp_path)
    both = ModelPrice(input_per_1m=0.5, output_per_1m=2.0, gpu_hour=4.0)
    prices = PriceTable(models={"tiny": both, "other": ModelPrice(gpu_hour=4.0)})
    costs = costed(store, scope, prices).set_index("model")["cost"]
    # The token price, as Upload & check's estimate takes it, not the GPU hour added to it.
    assert costs["tiny"] == pytest.approx((10 * 0.5 + 6 * 2.0) / 1e6)
    assert costs["other"] == pytest.approx(0.25 * 4.0)  # the engine's quarter hour
    unpriced = costed(store, scope, PriceTable(models={"tiny": both})).set_index("model")
    assert math.isnan(unpriced["cost"]["other"])  # no price for "other": unknown, never free


def test_the_star_row_prices_models_not_listed(tmp_path):
    store, scope = priced_jobs(tmp_path)
    prices = PriceTable(models={"*": ModelPrice(input_per_1m=1e6, output_per_1m=1e6)})
    assert costed(store, scope, prices)["cost"].tolist() == [8.0, 16.0]  # other, tiny


def test_the_table_shows_cost_as_money_beside_the_group(tmp_path):
    store, scope = priced_jobs(tmp_path)
    prices = PriceTable(models={"tiny": ModelPrice(input_per_1m=1e6, output_per_1m=1e6)})
    shown = summary_table(costed(store, scope, prices), "EUR")
    assert list(shown.columns)[:2] == ["model", "cost (EUR)"] and "cost" not in shown
    assert shown["cost (EUR)"].tolist() == [cost_text(math.nan), cost_text(16.0)]


def test_a_gpu_hour_prices_the_time_the_engine_ran_and_reused_answers_as_saved(tmp_path):
    """Issue 58, item 6: a rerun that ran 4.9 s cost 2 hours at the GPU-hour price, the
    span from its reused answers' original times to its own."""
    prompts = {f"r{i}": f"question {i}" for i in range(4)}
    first, rerun = reused_rerun(tmp_path, prompts, {"new": "another"}, seconds=(1800.0, 4.9))
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(first)
    store.ingest(rerun)
    scope = Scope(job_ids=[first.job_id, rerun.job_id])
    prices = PriceTable(models={"tiny": ModelPrice(gpu_hour=3600.0)})
    rows = costed(store, scope, prices, by="job")
    end = rows["job"].str.rsplit("_", n=1).str[-1]  # a label ends as its job's id does
    first_row = rows[end == first.job_id.rsplit("_", 1)[-1]].iloc[0]
    rerun_row = rows[end == rerun.job_id.rsplit("_", 1)[-1]].iloc[0]
    assert first_row["cost"] == pytest.approx(1800.0)
    assert rerun_row["cost"] == pytest.approx(4.9)  # was 7,200: two hours
    assert rerun_row["engine_hours"] == pytest.approx(4.9 / 3600)
    # Its four reused answers saved the time they took the first job (all of it).
    assert rerun_row["cost_saved"] == pytest.approx(1800.0)
    shown = summary_table(rows, "USD").set_index("job")["cost (USD)"]
    assert sorted(shown) == ["1,800.00", "4.90"]


def test_a_job_answered_wholly_by_reuse_costs_nothing_and_saves_its_originals_time():
    prices = PriceTable(models={"*": ModelPrice(gpu_hour=3600.0)})
    reused = Usage(reused=3, reused_completion_tokens=30, reused_engine_seconds=6.0)
    assert usage_cost(prices, "tiny", reused) == Cost(0.0, 6.0)
    unknown = Usage(computed=2, completion_tokens=5)  # no engine time known: not free
    assert usage_cost(prices, "tiny", unknown).spent is None


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


def test_a_cost_chart_without_prices_says_so_instead_of_plotting_zeros(tmp_path):
    store, scope = priced_jobs(tmp_path)
    fig = cost_figure(costed(store, scope, PriceTable()), "model")
    assert not fig.data and fig.layout.annotations[0].text == NO_PRICES
    priced = costed(store, scope, PriceTable(models={"tiny": ModelPrice(input_per_1m=1.0)}))
    fig = cost_figure(priced, "model", "EUR")
    assert list(fig.data[0].x) == ["tiny"] and "EUR" in fig.layout.title.text  # priced only


def test_a_short_jobs_throughput_is_a_bar_not_a_lone_dot(tmp_path):
    job = finished_job(tmp_path, {"a": "x", "b": "y"})
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    fig = throughput_figure(store, Scope(job_ids=[job.job_id]))
    assert fig.data[0].type == "bar" and list(fig.data[0].y) == [6]  # 3 tokens per answer


def test_reused_answers_are_not_the_throughput_of_the_job_that_reused_them(tmp_path):
    """Issue 58, item 8: a rerun's chart drew its reused tokens at the minutes their
    originals were made, two hours before the rerun existed."""
    prompts = {f"r{i}": f"question {i}" for i in range(4)}
    first, rerun = reused_rerun(tmp_path, prompts, {"new": "another"}, seconds=(60.0, 1.0))
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(first)
    store.ingest(rerun)
    fig = throughput_figure(store, Scope(job_ids=[rerun.job_id]))
    # Its one computed answer's 2 tokens, in the minute it ran (with the four reused ones,
    # 10 tokens over two minutes two hours apart).
    assert fig.data[0].type == "bar" and list(fig.data[0].y) == [2]


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
