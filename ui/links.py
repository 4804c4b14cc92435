"""Addresses that open a page on a job, a result or a filtered view, to share or bookmark.

A page writes what it shows into its address (``st.query_params``: ``?job=...&q=...``); an
address opened afresh (a shared link, a bookmark, a reload) chooses the same again. A value
of the address that is not here (a removed job, a status no result has) or cannot be read
(a page "x", a date "2026-13-45") is said, left out, and the page shows what it would
without it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

import streamlit as st

from core.store.compare import Side
from ui.text import escape


def linked(param: str) -> list[str]:
    """The address's values of ``param`` (a repeated parameter gives several)."""
    return [v for v in st.query_params.get_all(param) if v]


def not_here(what: str, values: list[str], instead: str) -> None:
    """Says which values of the address this studio does not have."""
    listed = ", ".join(f"'{escape(v)}'" for v in values[:5])
    st.warning(
        f"The link's {what} {listed} is not here (removed, renamed, or of another studio); "
        f"{instead}.",
        icon=":material/link_off:",
    )


def not_valid(what: str, value: str, instead: str, why: str = "cannot be read") -> None:
    """Says that a value of the address cannot be what it names (a page "x", a date
    "2026-13-45") or is out of range (``why``)."""
    st.warning(
        f"The link's {what} '{escape(value)}' {why}; {instead}.",
        icon=":material/link_off:",
    )


@dataclass(frozen=True)
class One:
    """A widget that holds one of ``options`` (a selectbox, a radio), matched by its text."""

    options: Collection[Any]


# What a widget holds: None a text, ``bool`` a tick box ("1" when ticked), ``int`` a whole
# number from 1 (a page, an item), ``date`` an ISO date, :class:`One` one of its options, any
# other collection several of its options (a multiselect: a repeated parameter).
Kind = type | One | Collection[Any] | None


def _read(kind: type, text: str) -> int | date | None:
    """``text`` as a whole number from 1 or an ISO date, or None when it is not one."""
    try:
        value = int(text) if kind is int else date.fromisoformat(text)
    except ValueError:
        return None
    return None if kind is int and value < 1 else value


def open_linked_job(ids: list[str], key: str) -> None:
    """Makes the address's ``job`` the page's job (``st.session_state["job_id"]``, which
    the page's job box opens with) when the box ``key`` has no choice yet this session;
    call :func:`linked_job_notice` after the box."""
    wanted = linked("job")
    if key in st.session_state or not wanted:
        return
    if wanted[0] in ids:
        st.session_state["job_id"] = wanted[0]
    else:
        st.session_state[f"link_notice::{key}"] = (wanted[0], None)


def linked_job_notice(key: str, job_id: str) -> None:
    """Says that the address's job is not here, over the page's own reruns (a Monitor
    refreshing), until another job is chosen in the box ``key``."""
    notice = st.session_state.get(f"link_notice::{key}")
    if notice is None:
        return
    missing, shown = notice
    if shown not in (None, job_id):
        del st.session_state[f"link_notice::{key}"]
        return
    st.session_state[f"link_notice::{key}"] = (missing, job_id)
    not_here("job", [missing], "showing the job the page opens with instead")


def fill_from_link(fields: Mapping[str, tuple[str, Kind]]) -> set[str]:
    """Gives each widget with no state yet this session the address's values: ``fields``
    maps a parameter to (the widget's key, what it holds: :data:`Kind`). A value the
    widget cannot hold is said and left out: the widget shows its own default. Returns
    the parameters whose values were given (a page checks a number against its range)."""
    given: set[str] = set()
    for param, (key, kind) in fields.items():
        values = linked(param)
        if key in st.session_state or not values:
            continue
        if kind is None or kind is bool:
            value: Any = values[0] if kind is None else values[0] == "1"
        elif kind is int or kind is date:
            value = _read(kind, values[0])
            if value is None:
                not_valid(param, values[0], "the page's own value is shown")
                continue
        elif isinstance(kind, One):
            value = {str(option): option for option in kind.options}.get(values[0])
            if value is None:
                not_here(param, values[:1], "the page's own choice is shown")
                continue
        else:
            by_text = {str(option): option for option in kind}
            unknown = [v for v in values if v not in by_text]
            if unknown:
                not_here(param, unknown, "it is left out")
            value = [by_text[v] for v in values if v in by_text]
        st.session_state[key] = value
        given.add(param)
    return given


def open_linked_position(param: str, key: str, count: int) -> None:
    """Moves ``st.session_state[key]`` (a position from 0 among ``count``: a sample's item,
    a pair) to the address's ``param`` (from 1), once per session; a number out of range
    is said, and the position stays."""
    if f"link_used::{key}" in st.session_state:
        return
    st.session_state[f"link_used::{key}"] = True
    values = linked(param)
    number = _read(int, values[0]) if values else None
    if values and number is None:
        not_valid(param, values[0], f"{param} 1 is shown")
    elif number is not None and number > count:
        not_valid(param, values[0], f"{param} 1 is shown", f"is past the last ({count:,})")
    elif number is not None:
        st.session_state[key] = number - 1


def write_link(values: Mapping[str, Any]) -> None:
    """Writes what the page shows into its address; empty values (None, "", [], False) are
    left out. A list is a repeated parameter; a number or a date is written as text."""
    shown: dict[str, list[str]] = {}
    for param, value in values.items():
        if value is True:
            shown[param] = ["1"]
        elif isinstance(value, list | tuple):
            if value:
                shown[param] = [str(v) for v in value]
        elif value is not None and value is not False and value != "":
            shown[param] = [str(value)]
    if {k: st.query_params.get_all(k) for k in st.query_params} != shown:  # else left alone
        st.query_params.from_dict(shown)


def review_sample(sample_id: str) -> None:
    """Moves to the Review page on a sample's first item."""
    st.session_state["sample_id"] = sample_id
    st.session_state["review_pos"] = 0
    st.switch_page("pages/review.py")


def compare_slices(a: Side, b: Side, key: str) -> dict[str, str]:
    """The address that opens Compare on two slices of one job (``a`` and ``b``, split by
    the same field), their items paired on ``key``: what pages/compare.py writes of them."""
    return {
        "mode": "slices",
        "job": a.job_id,
        "split": str(a.field),
        "va": str(a.value),
        "vb": str(b.value),
        "on": key,
    }
