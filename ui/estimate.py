"""An estimate's tokens, time and cost, as Upload & check and Run show them."""

from __future__ import annotations

import os

import streamlit as st

from core.plan.estimate import format_duration, load_note
from core.plan.pricing import PriceTable, format_money
from core.reuse.forecast import forecast_reuse
from core.reuse.index import local_owner
from core.schemas import JobDefaults
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


@st.cache_data(ttl=300, show_spinner=False, max_entries=8)
def _reuse_lines(
    path: str,
    changed: tuple[int, int],
    model: str,
    model_map: tuple,
    defaults: str,
    prices: str,
    owner: str,
) -> list[str]:
    # Read again when the file is written again (``changed``) or after five minutes (new
    # jobs' answers): it scans the file once more (about 6 s for 300,000 lines here).
    # ``owner`` is in the cache's key: one user's forecast is never shown to another.
    del changed
    return forecast_reuse(
        path,
        model=model,
        jobs_dir=paths().jobs,
        prices=PriceTable.model_validate_json(prices),
        defaults=JobDefaults.model_validate_json(defaults),
        model_map=dict(model_map),
        owner=owner,
    ).lines()


def reuse_note(
    path: str, model: str, model_map: dict[str, str], defaults: JobDefaults, prices: PriceTable
) -> None:
    """How many lines would take answers already made (docs/reuse.md), under the estimate,
    which counts every line."""
    stat = os.stat(path)
    lines = _reuse_lines(
        path,
        (stat.st_size, stat.st_mtime_ns),
        model,
        tuple(sorted(model_map.items())),
        defaults.model_dump_json(),
        prices.model_dump_json(),
        local_owner(signed_in_user()),  # whose job Run would make: only its answers count
    )
    for line in lines:
        st.caption(escape(f"Reuse: {line}."))
