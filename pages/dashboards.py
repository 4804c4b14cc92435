"""Dashboards: requests, rates, finish reasons, tokens, cost, throughput, latency, review pass
rates and the checks' pass rates."""

from __future__ import annotations

from datetime import date
from typing import NamedTuple

import pandas as pd
import streamlit as st

from core.plan.pricing import (
    PriceError,
    PriceTable,
    load_prices,
    price_rows,
    save_prices,
    table_from_rows,
)
from core.store import dashboards as dash
from core.store.db import Store
from ui.grading import fresh_checks
from ui.jobs import job_labels, jobs_or_stop
from ui.links import One, fill_from_link, linked, write_link
from ui.page_cache import fresh_or_recent
from ui.ranking import show_ranking_quality
from ui.store import store, through_app
from ui.text import escape

FIRST_CHART = dash.FIRST_FIGURE  # the chart the download offers first


class Chosen(NamedTuple):
    """The jobs, dates and grouping chosen at the top of the page."""

    job_ids: list[str]
    start: date | None
    end: date | None
    by: str

    @property
    def scope(self) -> dash.Scope:
        return dash.Scope(job_ids=self.job_ids, start=self.start, end=self.end)


class Made(NamedTuple):
    """The summary and figures of the chosen scope, and the address that shows them."""

    summary: pd.DataFrame
    figures: dict
    link: dict


def pick_scope(jobs: pd.DataFrame) -> Chosen:
    """The jobs, the dates and the grouping, as chosen or as the address has them."""
    fill_from_link(  # a shared link or a bookmark
        {
            "jobs": ("dash_jobs", list(jobs["job_id"])),
            "from": ("dash_from", date),
            "to": ("dash_to", date),
            "by": ("dash_by", One(dash.GROUPS)),
        }
    )
    c = st.columns([3, 1, 1, 1])
    job_ids = c[0].multiselect(
        "Jobs (all when empty)", list(jobs["job_id"]), format_func=job_labels(), key="dash_jobs"
    )
    start = c[1].date_input("From", value=None, key="dash_from")
    end = c[2].date_input("To", value=None, key="dash_to")
    by = c[3].selectbox("Group by", list(dash.GROUPS), key="dash_by")
    return Chosen(job_ids, start, end, by)


def price_table() -> PriceTable:
    """The price table, edited in place and saved when it changes; the saved one while an
    edit cannot be read."""
    saved = load_prices()
    # A label is markdown: the currency (from prices.json) and the model named * are
    # escaped, or "*" reads as emphasis or a bullet.
    price_label = f"Price table ({saved.currency}; the model named * prices the models not listed)"
    with st.expander(escape(price_label)):
        models = ["*", *dash.result_models(store())]
        edited = st.data_editor(
            pd.DataFrame(price_rows(saved, models)), hide_index=True, key="price_editor"
        )
        st.caption(
            "Per million input/output tokens for hosted-API prices, or per GPU hour for your "
            "own hardware, charged on each job's running time over all its runs (its model's "
            "load included); reused answers are priced as saved, not cost. The same table "
            "prices Results and the estimate on Upload & check."
        )
        try:
            prices = table_from_rows(edited.to_dict("records"), saved, saved.budget)
        except PriceError as exc:
            st.error(escape(exc), icon=":material/error:")
            prices = saved
        if prices != saved:
            save_prices(prices)
    return prices


def charts(index: Store, scope_key: tuple, by: str, prices_json: str) -> tuple[pd.DataFrame, dict]:
    """The summary and every figure of a scope, grouping and price table (given as values
    that do not change, for a computation that may run later)."""
    scope = dash.Scope(list(scope_key[0]), *scope_key[1:])
    priced = PriceTable.model_validate_json(prices_json)
    return dash.summary_and_figures(index, scope, by, priced)


def address(chosen: Chosen) -> dict:
    """What the page's address keeps: the scope, and the chart to download as chosen or as
    the address has it (kept while the charts are being made and the part that chooses it
    is not drawn, never dropped)."""
    chart = st.session_state.get("dash_html") or next(iter(linked("chart")), None)
    return {
        "jobs": chosen.job_ids,
        "from": chosen.start,
        "to": chosen.end,
        "by": chosen.by if chosen.by != next(iter(dash.GROUPS)) else None,
        "chart": chart if chart != FIRST_CHART else None,
    }


def charts_or_stop(chosen: Chosen, prices: PriceTable) -> Made:
    """The summary and the charts, made once per scope, grouping, prices and index state
    for every session; while they are being made, or when the scope has no results, the
    page says so and stops there."""
    db = store()
    scope = chosen.scope
    scope_key = (tuple(scope.job_ids), scope.start, scope.end)
    version = db.data_version(chosen.job_ids or None)
    priced = prices.model_dump_json()
    made = fresh_or_recent(
        "dashboards",
        (scope_key, chosen.by, priced),
        version,
        lambda s=scope_key, b=chosen.by, p=priced: charts(db, s, b, p),  # bound: may run later
        what="the summary and the charts",
    )
    link = address(chosen)
    if made is None:  # being computed: the page redraws itself when they are done
        write_link(link)
        st.stop()
    summary, figures = made
    if summary.empty:
        write_link(link)
        st.info("No results in this scope; widen the jobs or the dates.")
        st.stop()
    return Made(summary, figures, link)


def chart_grid(figures: dict) -> None:
    """Every chart, two to a row."""
    columns = st.columns(2)
    for i, (name, fig) in enumerate(figures.items()):
        with columns[i % 2]:
            # The chart's toolbar has "Download plot as a png" (named after the chart).
            options = {"toImageButtonOptions": {"filename": name, "format": "png"}}
            st.plotly_chart(fig, key=f"chart_{name}", config=options)


def html_download(figures: dict, link: dict) -> None:
    """One HTML file at a time: each holds plotly.js (about 4 MB) so it opens offline, and
    is made only when its button is clicked. The choice is in the page's address; it is
    not a fragment, whose reruns do not reliably write the address (Streamlit 1.67)."""
    c = st.columns([2, 1])
    fill_from_link({"chart": ("dash_html", One(figures))})
    chosen = c[0].selectbox("Chart to download as HTML", list(figures), key="dash_html")
    c[1].download_button(
        "Download HTML",
        lambda: dash.figure_html(figures[chosen]),  # made when clicked: ~4 MB of HTML
        on_click="ignore",
        file_name=f"{chosen}.html",
        mime="text/html",
        key="html_download",
    )
    write_link({**link, "chart": chosen if chosen != FIRST_CHART else None})


through_app()
st.title("Dashboards")
jobs = jobs_or_stop("No jobs yet. Charts appear once a job has results.")
chosen = pick_scope(jobs)
prices = price_table()
fresh_checks(chosen.job_ids or list(jobs["job_id"]), job_labels())  # in the background
made = charts_or_stop(chosen, prices)
st.dataframe(dash.summary_table(made.summary, prices.currency), hide_index=True, width="stretch")
chart_grid(made.figures)
show_ranking_quality(store(), chosen.job_ids or list(jobs["job_id"]), "dash_rank", chart=True)
html_download(made.figures, made.link)
