"""Addresses that open a page on a job, a result or a filtered view, to share or bookmark.

A page writes what it shows into its address (``st.query_params``: ``?job=...&q=...``); an
address opened afresh (a shared link, a bookmark, a reload) chooses the same again. A value
of the address that is not here (a removed job, a status no result has) is said, left out,
and the page shows what it would without it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import streamlit as st

from pages.shared import escape


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


def fill_from_link(fields: Mapping[str, tuple[str, Collection[str] | type | None]]) -> None:
    """Gives each widget with no state yet this session the address's values: ``fields``
    maps a parameter to (the widget's key, its options: None for a text, ``bool`` for a
    tick box, "1" when ticked). A multiselect takes every value of a repeated parameter."""
    for param, (key, options) in fields.items():
        values = linked(param)
        if key in st.session_state or not values:
            continue
        if options is None or options is bool:
            st.session_state[key] = values[0] if options is None else values[0] == "1"
            continue
        unknown = [v for v in values if v not in options]
        if unknown:
            not_here(param, unknown, "it is left out of the filter")
        st.session_state[key] = [v for v in values if v in options]


def write_link(values: Mapping[str, str | list[str] | bool | None]) -> None:
    """Writes what the page shows into its address; empty values are left out."""
    shown: dict[str, list[str]] = {}
    for param, value in values.items():
        if value is True:
            shown[param] = ["1"]
        elif value:
            shown[param] = [value] if isinstance(value, str) else [str(v) for v in value]
    if {k: st.query_params.get_all(k) for k in st.query_params} != shown:  # else left alone
        st.query_params.from_dict(shown)
