"""Cancel, Resume and Retry buttons, through the one way a job restarts; a restart is said
at once, on the page drawn again with the job's new state."""

from __future__ import annotations

import streamlit as st

from core.jobs.folder import JobFolder, cancel
from core.jobs.ledger import summary as ledger_summary
from core.jobs.output_file import CorruptLine
from core.jobs.submit import Refused, resubmit
from ui.jobs import job_label
from ui.text import escape


def job_controls(job: JobFolder, key: str, retry: bool = True) -> None:
    """Cancel, Resume and Retry-failed buttons, each shown only when it applies (the Jobs
    page has its own rerun of failed, expired and missing requests: ``retry=False``)."""
    started_said(job)
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
        restart(job, retry=False, done=f"Resume of the {status.left:,} requests without a result")
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
        restart(job, retry=True, done=f"Retry of {retryable:,} failed requests")


STARTED = "job_controls_started"  # (job id, what the last click started), said once


def restart(job: JobFolder, *, retry: bool, done: str, shard: int | None = None) -> None:
    """Resume / retry / rerun through the one way in; shows why when it is refused. Else the
    page is drawn again at once: the job's state is then queued (no button offers the same
    again) and ``done`` (what was started, e.g. "Rerun of 3 requests") is said above it."""
    try:
        started = resubmit(job, retry=retry, shard=shard)
    except Refused as refused:
        for problem in refused.problems:
            st.error(escape(problem), icon=":material/block:")
        return
    when = (
        "the worker holding the engine takes it up (after the job it runs now, if any)"
        if started.worker is None
        else "a worker is starting for it"
    )
    said = f"{done} queued as job {job_label(job.job_id)}: {when}. Monitor follows it."
    st.session_state[STARTED] = (job.job_id, said)
    st.rerun()


def started_said(job: JobFolder) -> None:
    """What the last click started for this job, said once on the page drawn after it."""
    started = st.session_state.get(STARTED)
    if started is not None and started[0] == job.job_id:
        del st.session_state[STARTED]
        st.success(escape(started[1]), icon=":material/play_arrow:")
