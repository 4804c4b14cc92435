"""Choosing a job: the list or an empty state, labels for selectboxes, one job opened."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import streamlit as st

from core.jobs.folder import JobFolder, JobUnreadable
from core.schemas import job_label as label_of
from ui.store import paths, store, unreadable_notice
from ui.text import escape


def jobs_or_stop(empty_message: str) -> pd.DataFrame:
    """The jobs in the store, freshly ingested; or, when there are none, an empty state that
    says what to do first (and the page stops there)."""
    db = store()
    db.ingest_all(paths().jobs)
    unreadable_notice(db.unreadable)
    jobs = db.jobs()
    if jobs.empty:
        st.info(empty_message)
        st.page_link("pages/upload.py", label="Upload & check", icon=":material/upload_file:")
        st.stop()
    return jobs


def job_labels() -> Callable[[str], str]:
    """The ``format_func`` of every selectbox and multiselect of job ids: a job's name and
    the end of its id, or its id alone (``core.schemas.job_label``). Names come from the
    index in one read; a job not indexed yet is read from its folder. Labels are plain
    text for a widget: pass one through :func:`escape` before it goes into markdown."""
    names = store().job_names()

    def label(job_id: str) -> str:
        name = names.get(job_id)
        if name is None:
            try:
                name = JobFolder(paths().jobs / Path(job_id).name).name
            except JobUnreadable:
                name = ""
        return label_of(job_id, name)

    return label


def job_label(job_id: str) -> str:
    """One job's label (see :func:`job_labels`)."""
    return job_labels()(job_id)


def open_job(job_id: str) -> JobFolder:
    """The chosen job's folder, read; if it is gone or cannot be read, the page says so
    (the reason as plain text) and stops there."""
    job = JobFolder(paths().jobs / Path(job_id).name)
    if not job.spec_file.is_file():
        st.error(
            "This job's folder is gone; it was removed from the studio.", icon=":material/error:"
        )
        store().ingest_all(paths().jobs)  # forget it
        st.stop()
    reason = job.readable()
    if reason is not None:
        st.error(
            "This job's folder cannot be read; every other job works.", icon=":material/error:"
        )
        st.text(f"job {job.job_id} is unreadable: {reason}")
        st.stop()
    return job


def job_origin(job_id: str) -> None:
    """A caption with the job's owner and batch metadata, where it has any."""
    try:
        origin = JobFolder(paths().jobs / Path(job_id).name).read_spec().origin
    except JobUnreadable:  # open_job says why, where the page opens it
        return
    if origin:
        st.caption(escape(origin))


def jobs_with_metadata(job_ids: list[str], key: str) -> list[str]:
    """A filter of jobs by their batch metadata (``key=value`` pairs, all must hold),
    shown only when some job has metadata; returns the jobs kept, in order."""
    metadata: dict[str, dict[str, str]] = {}
    for job_id in job_ids:
        try:
            job = JobFolder(paths().jobs / Path(job_id).name)
            metadata[job_id] = job.peek_spec().metadata  # parsed once while unchanged
        except JobUnreadable:
            metadata[job_id] = {}
    pairs = sorted({f"{k}={v}" for m in metadata.values() for k, v in m.items()})
    if not pairs:
        return job_ids
    chosen = st.multiselect("Batch metadata (all jobs when empty)", pairs, key=key)
    wanted = [pair.split("=", 1) for pair in chosen]
    return [j for j in job_ids if all(metadata[j].get(k) == v for k, v in wanted)]
