"""Jobs: every job with its state, provenance and reconciliation; cancel, resume, retry."""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from core.api.batches import refused_rows
from core.jobs.folder import JobFolder, list_jobs
from core.jobs.ledger import (
    JobSummary,
    Shard,
    read_ledger,
    retryable_shards,
    summary,
    verify,
    write_rerun_file,
)
from core.jobs.names import rename_job
from core.jobs.output_file import CorruptLine
from core.jobs.queue import priority, queued_jobs, set_priority
from core.jobs.submit import Refused, approve, reject
from core.jobs.windows import held_note, sentence
from core.schemas import NAME_MAX, JobSpec, JobStatus
from ui.job_controls import job_controls, restart
from ui.jobs import job_label, job_labels, job_origin, jobs_or_stop, open_job
from ui.sign_in import access_now, deciding_user
from ui.store import paths, store, through_app
from ui.text import escape

QUEUE_SHOWN = 20  # queued jobs listed with their priority (the rest counted)
COLUMNS = ["name", "job_id", "source", "model", "state", "total", "succeeded", "failed"]


class Chosen(NamedTuple):
    """The job chosen, its folder opened, and its status and spec as read once."""

    job_id: str
    job: JobFolder
    status: JobStatus
    spec: JobSpec


def refused_section(rows: list[dict]) -> None:
    """The Batch API's batches that failed validation: submitted, but no job was made."""
    if not rows:
        return
    st.subheader("Batches that failed validation")
    st.caption(
        "Sent to the Batch API (/v1/batches) with a file that has invalid lines, or lines "
        "for another endpoint: refused whole, as OpenAI does, before any job was made. "
        "GET /v1/batches/ID lists every error."
    )
    shown = pd.DataFrame(rows)[["batch_id", "name", "state", "reason", "created_at"]]
    st.dataframe(shown, hide_index=True, width="stretch")


def job_table(refused: list[dict]) -> pd.DataFrame:
    """Every job, then the refused batches; with no job, the refused batches and an empty
    state (the page stops there)."""
    if not list_jobs(paths().jobs):  # the page stops below: show them before it does
        refused_section(refused)
    jobs = jobs_or_stop("No jobs yet. Check a batch file and start a run first.")
    st.dataframe(
        jobs[[*COLUMNS, "created_at"]],
        hide_index=True,
        width="stretch",
    )
    refused_section(refused)
    return jobs


def queue_section(waiting: list[JobFolder]) -> None:
    """The first jobs waiting for the engine, in order, each with its priority to change
    (a widget each: one owner's thousand queued jobs would cost seconds a rerun)."""
    if not waiting:
        return
    st.subheader("Queue")
    st.caption(
        "One engine runs one job at a time; queued jobs start in this order. Raise a job's "
        "priority to move it up."
    )
    label = job_labels()  # the index's names read once, not once a row
    for place, queued in enumerate(waiting[:QUEUE_SHOWN], start=1):
        c1, c2 = st.columns([3, 1])
        spec = queued.peek_spec()
        c1.write(f"{place}. {escape(label(queued.job_id))} · {escape(spec.source)}")
        held = held_note(spec, queued.peek_status())
        if held:  # the worker starts it by itself when its run window opens
            c1.caption(escape(sentence(held)))
        priority_box(c2, queued)
    later = waiting[QUEUE_SHOWN:]
    if later:
        st.caption(
            f"{len(later):,} more queued jobs after these; Monitor shows a chosen job's place."
        )
        c1, c2 = st.columns([3, 1])
        places = {queued.job_id: place for place, queued in enumerate(later, QUEUE_SHOWN + 1)}
        chosen = c1.selectbox(
            "A later queued job",
            later,
            format_func=lambda q: f"{places[q.job_id]}. {label(q.job_id)}",
            key="queue-later",
        )
        priority_box(c2, chosen)


def priority_box(container: DeltaGenerator, queued: JobFolder) -> None:
    """The queued job's priority, changed in place (the queue's order follows)."""
    new = container.number_input(
        "Priority",
        -100,
        100,
        priority(queued),
        key=f"prio-{queued.job_id}",
        label_visibility="collapsed",
    )
    if new != priority(queued):
        set_priority(queued, int(new))
        st.rerun()


def pick_job(jobs: pd.DataFrame) -> Chosen:
    """The job to show (the one last opened on any page, else the first), opened."""
    ids = list(jobs["job_id"])
    current = st.session_state.get("job_id")
    job_id = st.selectbox(
        "Job", ids, index=ids.index(current) if current in ids else 0, format_func=job_labels()
    )
    st.session_state["job_id"] = job_id
    job = open_job(job_id)
    job_origin(job_id)
    return Chosen(job_id, job, job.read_status(), job.read_spec())


def header(chosen: Chosen) -> None:
    """The job's name and state, its rename, its controls and links to its other pages."""
    job, job_id = chosen.job, chosen.job_id
    st.subheader(f"{escape(job_label(job_id))}: {chosen.status.display_state}")
    if chosen.status.state == "loading" and not chosen.status.interrupted:
        st.caption(escape(chosen.status.message))  # which model loads, or what it waits for
    with st.form("rename", border=False):
        c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
        new_name = c1.text_input(
            "Name", job.name, NAME_MAX, key=f"name-{job_id}", placeholder="no name yet: give one"
        )
        if c2.form_submit_button("Rename", icon=":material/edit:"):
            try:
                kept_name = rename_job(job, new_name)
            except ValueError as exc:
                st.error(escape(exc), icon=":material/block:")
            else:
                store().ingest(job)  # the index shows the new name at once
                st.toast(f"Renamed to {escape(kept_name)}")
                st.rerun()
    approval_controls(chosen)
    held = held_note(chosen.spec, chosen.status)
    if held:
        st.info(escape(sentence(held)), icon=":material/schedule:")
    job_controls(job, key="jobs", retry=False)  # the rerun below covers failed requests
    cols = st.columns(2)
    cols[0].page_link("pages/monitor.py", label="Monitor", icon=":material/monitoring:")
    cols[1].page_link("pages/results.py", label="Results", icon=":material/table_view:")


def approval_controls(chosen: Chosen) -> None:
    """A job awaiting approval: why, the estimate and who asked; Approve and Reject."""
    status = chosen.status
    if status.state != "awaiting_approval":
        if status.state == "failed" and (status.error or "").startswith("rejected by "):
            st.error(escape(status.error), icon=":material/block:")
        return
    st.warning(escape(status.message), icon=":material/approval:")
    why = st.text_input("Reason (to reject)", key=f"reject-why-{chosen.job_id}")
    c = st.columns(2)
    who, access = deciding_user(), access_now()
    try:
        if c[0].button("Approve", key="approve", type="primary", icon=":material/check:"):
            approve(chosen.job, who, access)
            st.toast(f"Approved by {escape(who)}: queued.")
            st.rerun()
        if c[1].button("Reject", key="reject", icon=":material/close:"):
            reject(chosen.job, who, why, access)
            st.toast(f"Rejected by {escape(who)}.")
            st.rerun()
    except Refused as refused:
        for problem in refused.problems:
            st.error(escape(problem), icon=":material/block:")


def reconciliation(chosen: Chosen) -> None:
    """Every request against its result, the rerun of those without a good one, shards."""
    st.subheader("Reconciliation")
    try:
        known = summary(chosen.job, chosen.spec.shard_size)  # read once per change of the files
    except CorruptLine as exc:  # the file and line, never a count that leaves it out
        st.error(escape(f"{exc}. `python -m core verify {chosen.job.job_id}` checks the rest."))
        return
    report = known.reconciliation
    c = st.columns(5)
    c[0].metric("Requests", report.requests)
    c[1].metric("Succeeded", report.succeeded)
    c[2].metric("Failed", report.failed)
    c[3].metric("Without a result", len(report.missing))
    c[4].metric("Success rate", f"{report.success_rate:.1%}")
    if report.duplicates or report.unexpected:
        st.error(
            f"{len(report.duplicates)} requests have two results and {len(report.unexpected)} "
            "results match no request."
        )
    if report.failures_by_class:
        st.dataframe(
            pd.DataFrame(
                [{"failure": k, "requests": v} for k, v in report.failures_by_class.items()]
            ),
            hide_index=True,
            width="stretch",
        )
    stopped = chosen.status.is_final or chosen.status.interrupted
    rerun_button(chosen.job, known, stopped)
    if len(known.shards) > 1:
        shards_section(chosen.job, known.shards, stopped)


def rerun_button(job: JobFolder, known: JobSummary, stopped: bool) -> None:
    """Rerun the failed, expired or missing requests into the same job, once it stopped."""
    can_rerun = bool(known.retryable) and stopped
    label = f"Rerun the {known.retryable} failed, expired or missing requests"
    if can_rerun and st.button(label, type="primary"):
        write_rerun_file(job, read_ledger(job).retryable(), job.path / "rerun.jsonl")
        done = (
            f"Rerun of the {known.retryable:,} failed, expired or missing requests (kept as "
            "rerun.jsonl)"
        )
        restart(job, retry=True, done=done)


def shards_section(job: JobFolder, parts: list[Shard], stopped: bool) -> None:
    """Each shard's requests and state; one shard retried alone, once the job stopped."""
    st.subheader("Shards")
    st.dataframe(
        pd.DataFrame(
            [{"shard": p.number, "state": p.state, "first": p.first, "last": p.last,
              "succeeded": p.succeeded, "failed": p.failed, "without a result": p.missing}
             for p in parts]
        ),
        hide_index=True,
        width="stretch",
    )  # fmt: skip
    retryable_parts = retryable_shards(parts)
    if retryable_parts and stopped:
        c1, c2 = st.columns([1, 3])
        number = c1.selectbox("Shard", retryable_parts, key="retry_shard")
        if c2.button(f"Retry shard {number} alone", key="retry_shard_button"):
            done = f"Rerun of shard {number}'s failed and missing requests"
            restart(job, retry=True, shard=int(number), done=done)


def verify_section(job: JobFolder) -> None:
    """The results' hash chains and completeness, checked on a click."""
    if st.button("Verify results (hash chain and completeness)"):
        result = verify(job)
        if result.ok:
            st.success(result.describe())
            st.code(
                "\n".join(f"{name}  {head}" for name, head in result.heads.items()), language=None
            )
        else:
            for problem in result.problems:
                st.error(escape(problem))


def downloads(chosen: Chosen) -> None:
    """A download button for each of the job's files that exists."""
    job = chosen.job
    files = [(job.output, "output.jsonl"), (job.errors, "errors.jsonl"), (job.input, "input.jsonl")]
    cols = st.columns(len(files))
    for col, (path, name) in zip(cols, files, strict=True):
        if path.exists():
            col.download_button(
                f"Download {name}",
                path.read_bytes,  # read when clicked, not on every rerun of the page
                file_name=f"{chosen.job_id}_{name}",
                key=f"dl-{name}",
                on_click="ignore",
            )


def provenance(spec: JobSpec) -> None:
    """What job.json records of the job's input, engine, defaults and origin."""
    with st.expander("Provenance"):
        st.json(
            {
                "input": {
                    "file": spec.source,
                    "sha256": spec.input_sha256,
                    "lines": spec.input_lines,
                },
                "engine": spec.engine.model_dump(),
                "defaults": spec.defaults.model_dump(),
                **spec.provenance,
                # Made through the Batch API (/v1): its request and the submitter's metadata.
                **({"batch": spec.batch.model_dump()} if spec.batch else {}),
                **({"metadata": spec.metadata} if spec.metadata else {}),
            }
        )


def history(chosen: Chosen) -> None:
    """The job's states over time and the end of its worker's log."""
    with st.expander("History and worker log"):
        st.table(pd.DataFrame(chosen.status.history).fillna(""))  # notes: only some entries
        st.code(chosen.job.log_tail(40) or "(no log yet)", language=None)


through_app()
st.title("Jobs")
jobs = job_table(refused_rows(paths().home))
queue_section(queued_jobs(paths().jobs))
chosen = pick_job(jobs)
header(chosen)
reconciliation(chosen)
verify_section(chosen.job)
downloads(chosen)
provenance(chosen.spec)
history(chosen)
