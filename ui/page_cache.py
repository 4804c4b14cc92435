"""Figures a page computes from the index, kept per process and shared by every
session: stale while they are made again in the background."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from core.config import page_wait_seconds
from core.recent import PENDING, Latest
from ui.store import store


@st.cache_resource
def page_values(page: str) -> Latest:
    """What one page computed from the index, kept in this process for every session."""
    return Latest(16)


def fresh_or_recent(
    page: str,
    key: tuple,
    version: tuple,
    make: Callable[[], Any],
    what: str = "these figures",
    patient: bool = False,
) -> Any:
    """``make()`` for ``key`` at the index's ``version`` (:meth:`Store.data_version`), kept
    per page and shared by every session. When only results streaming in moved the version
    on (its last item), the last value is shown at once and the next one made in the
    background, and a caption says so. A value not made yet is made in the background too:
    the page waits for it a moment (:func:`core.config.page_wait_seconds`), then gets None,
    says that ``what`` is being computed, and reruns by itself when it is done.
    ``patient``: a first value is waited for as long as it takes (a page whose values take
    well under a second, where the redraw's poll would cost more than the wait)."""
    index = str(store().path)  # another data folder is another index
    values, kept = page_values(page), (index, key, version[:-1])
    wait = None if patient else page_wait_seconds()
    value, current = values.get(kept, version[-1], make, wait)
    if value is PENDING:

        @st.fragment(run_every=1.0)
        def computing() -> None:
            if values.ready(kept):
                st.rerun()  # the whole page, now with the value
            st.caption(f"Computing {what}… they show here as soon as they are done.")

        computing()
        return None
    if not current:
        st.caption(
            "Results are still coming in: these figures are from a moment ago and catch up "
            "in the background (they show on the next click)."
        )
    return value
