"""An estimate's tokens, time and cost, as Upload & check and Run show them."""

from __future__ import annotations

import json
import os
import time

import streamlit as st

from core.check.report import CheckReport
from core.jobs.submit import Submission, planned_spec
from core.plan.estimate import format_duration, load_note
from core.plan.pricing import PriceTable, format_money
from core.recent import Recent
from core.reuse.forecast import BackgroundForecast
from core.reuse.index import local_owner
from ui.sign_in import signed_in_user
from ui.store import paths
from ui.text import escape


def estimate_metrics(estimate: dict) -> None:
    """Input tokens, expected output tokens, time and cost of an estimate (its ``to_dict()``),
    as Upload & check and Run both show them."""
    cols = st.columns(4)
    cols[0].metric("Input tokens", f"{estimate['input_tokens']:,}")
    cols[1].metric(
        "Output tokens (expected)",
        f"{estimate['expected_output_tokens']:,}",
        help=f"At most {estimate['max_output_tokens']:,}",
    )
    notes = [
        load_note(m["model"], m.get("loaded", False), m.get("load_seconds") or 0.0)
        for m in estimate.get("models") or []
    ]
    cols[2].metric(
        "Time", format_duration(estimate["seconds"]), help="; ".join(n for n in notes if n) or None
    )
    cost, currency = estimate["cost"], estimate.get("currency", "USD")
    # "no price" where a model has none (an estimate kept from before cost_text: the amount).
    cols[3].metric("Cost", estimate.get("cost_text") or format_money(cost, currency))


FORECAST_SECONDS = 300  # a forecast is made again after this (new jobs' answers)
# Forecasts under way or made in this process, by file, settings and owner: a page's rerun
# polls the one already running instead of starting another.
_forecasts: Recent[str, BackgroundForecast] = Recent(8)


def reuse_note(report: CheckReport, submission: Submission, prices: PriceTable) -> None:
    """How many lines would take answers already made (docs/reuse.md), under the estimate,
    which counts every line, and the settings it assumed: those a job of ``submission``
    runs with (:func:`core.jobs.submit.planned_spec`), so a choice on Run that changes a
    key changes the forecast. Keyed from the digests the file's check kept (``report``),
    without reading the file again; made in a thread, and a model hashed for the first
    time shows its progress meanwhile."""
    path = report.path
    spec = planned_spec(submission)
    owner = local_owner(signed_in_user())  # whose job Run would make: only its answers count
    stat = os.stat(path)
    key = json.dumps(
        [
            path,
            stat.st_size,
            stat.st_mtime_ns,
            spec.model_dump_json(),
            prices.model_dump_json(),
            owner,
        ]
    )
    running = _forecasts.get(key)
    if running is None or (running.done and time.monotonic() - running.started > FORECAST_SECONDS):
        running = _forecasts.put(
            key,
            BackgroundForecast(report, spec, jobs_dir=paths().jobs, prices=prices, owner=owner),
        )
    if running.wait(timeout=2.0):  # a small file's forecast is shown at once
        _show_forecast(running)
    else:
        _forecast_progress(running)


def _show_forecast(done: BackgroundForecast) -> None:
    if done.error:
        st.caption(escape(f"Reuse: {done.error}."))
    for line in done.forecast.lines() if done.forecast else []:
        st.caption(escape(f"Reuse: {line}."))


@st.fragment(run_every=1.0)
def _forecast_progress(running: BackgroundForecast) -> None:
    """The forecast's progress, every second; the page is drawn again once it is done."""
    if running.done:
        st.rerun()
    if running.to_hash:
        gib = 2**30
        st.progress(
            min(1.0, running.hashed / running.to_hash),
            text=f"Reuse: hashing the model's files the first time (cached after): "
            f"{running.hashed / gib:,.1f} of {running.to_hash / gib:,.1f} GiB",
        )
    else:
        st.caption("Reuse: looking for answers already made…")
