"""An estimate's tokens, time and cost, as Upload & check and Run show them."""

from __future__ import annotations

import streamlit as st

from core.plan.estimate import format_duration, load_note
from core.plan.pricing import format_money


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
