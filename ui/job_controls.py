"""Cancel, Resume and Retry buttons, through the one way a job restarts."""

from __future__ import annotations

import streamlit as st

from core.jobs.folder import JobFolder, cancel
from core.jobs.ledger import summary as ledger_summary
from core.jobs.output_file import CorruptLine
from core.jobs.submit import Refused, resubmit
from ui.text import escape


def job_controls(job: JobFolder, key: str, retry: bool = True) -> None:
    """Cancel, Resume and Retry-failed buttons, each shown only when it applies (the Jobs
    page has its own rerun of failed, expired and missing requests: ``retry=False``)."""
    status = job.read_status()
    cols = st.columns(3)
    running = not status.is_final and not status.interrupted
    if status.state == "cancelling" and running:
        if cols[0].button(
            "Stop now",
            key=f"stop-{key}",
            icon=":material/cancel:",
            help="Stop without waiting for the engine's step; a resume runs what has no result.",
        ):
            st.toast(cancel(job, now=True))
    elif running and cols[0].button(
        "Cancel",
        key=f"cancel-{key}",
        icon=":material/stop:",
        help="Stop within seconds: the requests in the engine are aborted, every result "
        "written is kept, and a resume runs the rest.",
    ):
        st.toast(cancel(job))
    resumable = status.interrupted or (status.state == "cancelled" and status.left)
    if resumable and cols[1].button(
        f"Resume ({status.left:,} to run)",
        key=f"resume-{key}",
        type="primary",
        icon=":material/play_arrow:",
        help="Runs only the requests without a result.",
    ):
        restart(job, retry=False, done="Resumed: only requests without a result run.")
    # Only failures a retry can change (never invalid input or what the engine refused).
    try:
        retryable = (
            ledger_summary(job, job.read_spec().shard_size).retryable_failures
            if retry and status.is_final and status.failed
            else 0
        )
    except CorruptLine:  # Reconciliation names the line; a retry would be refused for it
        retryable = 0
    if retryable and cols[2].button(
        f"Retry {retryable:,} failed",
        key=f"retry-{key}",
        icon=":material/replay:",
        help="Reruns the failed requests a retry can change; invalid input and requests "
        "the engine refused fail the same way again, so they are not rerun.",
    ):
        restart(job, retry=True, done="Retrying failed requests (invalid input is never retried).")


def restart(job: JobFolder, *, retry: bool, done: str, shard: int | None = None) -> bool:
    """Resume / retry / rerun through the one way in; shows why when it is refused."""
    try:
        resubmit(job, retry=retry, shard=shard)
    except Refused as refused:
        for problem in refused.problems:
            st.error(escape(problem), icon=":material/block:")
        return False
    st.toast(done)
    return True
