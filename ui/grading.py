"""Checks brought up to date in the background, and a notice while they are."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from ui.store import store
from ui.text import escape


def fresh_checks(job_ids: list[str], label: Callable[[str], str]) -> None:
    """Brings the checks of these jobs up to date from their saved rules, in the background
    (a page never grades a million results while it draws): names saved rules that no
    longer load, and while a grading runs says so and reruns the page when it ends."""
    from core.qa.grading import grading_now, refresh_in_background

    db = store()
    found = refresh_in_background(db, job_ids)
    for job_id, problem in found.problems.items():
        st.warning(f"The saved rules of {escape(label(job_id))} cannot be used:")
        st.text(problem)
    if not found.grading:
        return

    @st.fragment(run_every=1.0)
    def grading_notice() -> None:
        left = grading_now(db, found.grading)
        if not left:
            st.rerun()  # the whole page: its figures read the new outcomes
        st.caption(
            f"Grading… the checks of {', '.join(escape(label(j)) for j in left)} are being "
            "brought up to date from their saved rules; the figures below are the last ones "
            "and change when it is done."
        )

    grading_notice()
