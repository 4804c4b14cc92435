"""Jobs: every job with its state, provenance and reconciliation; cancel, resume, retry."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.api.batches import refused_rows
from core.jobs.folder import list_jobs
from core.jobs.ledger import read_ledger, summary, verify, write_rerun_file
from core.jobs.names import rename_job
from core.jobs.queue import priority, queued_jobs, set_priority
from core.schemas import NAME_MAX
from ui.job_controls import job_controls, restart
from ui.jobs import job_label, job_labels, job_origin, jobs_or_stop, open_job
from ui.store import paths, store, through_app
from ui.text import escape

through_app()
st.title("Jobs")


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


refused = refused_rows(paths().home)
if not list_jobs(paths().jobs):  # the page stops below: show them before it does
    refused_section(refused)
jobs = jobs_or_stop("No jobs yet. Check a batch file and start a run first.")

COLUMNS = ["name", "job_id", "source", "model", "state", "total", "succeeded", "failed"]
st.dataframe(
    jobs[[*COLUMNS, "created_at"]],
    hide_index=True,
    width="stretch",
)
refused_section(refused)

waiting = queued_jobs(paths().jobs)
if waiting:
    st.subheader("Queue")
    st.caption(
        "One engine runs one job at a time; queued jobs start in this order. Raise a job's "
        "priority to move it up."
    )
    for place, queued in enumerate(waiting, start=1):
        c1, c2 = st.columns([3, 1])
        source = queued.read_spec().source
        c1.write(f"{place}. {escape(job_label(queued.job_id))} · {escape(source)}")
        new = c2.number_input(
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

ids = list(jobs["job_id"])
current = st.session_state.get("job_id")
job_id = st.selectbox(
    "Job", ids, index=ids.index(current) if current in ids else 0, format_func=job_labels()
)
st.session_state["job_id"] = job_id
job = open_job(job_id)
job_origin(job_id)
status = job.read_status()
spec = job.read_spec()

st.subheader(f"{escape(job_label(job_id))}: {status.display_state}")
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
job_controls(job, key="jobs", retry=False)  # the rerun below covers failed requests
cols = st.columns(2)
cols[0].page_link("pages/monitor.py", label="Monitor", icon=":material/monitoring:")
cols[1].page_link("pages/results.py", label="Results", icon=":material/table_view:")

st.subheader("Reconciliation")
known = summary(job, spec.shard_size)  # read once per change of the job's files
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
        pd.DataFrame([{"failure": k, "requests": v} for k, v in report.failures_by_class.items()]),
        hide_index=True,
        width="stretch",
    )
can_rerun = bool(known.retryable) and (status.is_final or status.interrupted)
label = f"Rerun the {known.retryable} failed, expired or missing requests"
if can_rerun and st.button(label, type="primary"):
    write_rerun_file(job, read_ledger(job).retryable(), job.path / "rerun.jsonl")
    restart(
        job, retry=True, done="Rerunning into the same job; the subset is saved as rerun.jsonl."
    )
parts = known.shards
if len(parts) > 1:
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
    retryable_parts = [p.number for p in parts if p.state in ("failed", "partial", "pending")]
    if retryable_parts and (status.is_final or status.interrupted):
        c1, c2 = st.columns([1, 3])
        number = c1.selectbox("Shard", retryable_parts, key="retry_shard")
        if c2.button(f"Retry shard {number} alone", key="retry_shard_button"):
            done = f"Rerunning the failed and missing requests of shard {number}."
            restart(job, retry=True, shard=int(number), done=done)

if st.button("Verify results (hash chain and completeness)"):
    result = verify(job)
    if result.ok:
        st.success(result.describe())
        st.code("\n".join(f"{name}  {head}" for name, head in result.heads.items()), language=None)
    else:
        for problem in result.problems:
            st.error(escape(problem))

files = [(job.output, "output.jsonl"), (job.errors, "errors.jsonl"), (job.input, "input.jsonl")]
cols = st.columns(len(files))
for col, (path, name) in zip(cols, files, strict=True):
    if path.exists():
        col.download_button(
            f"Download {name}",
            path.read_bytes,  # read when clicked, not on every rerun of the page
            file_name=f"{job_id}_{name}",
            key=f"dl-{name}",
            on_click="ignore",
        )

with st.expander("Provenance"):
    st.json(
        {
            "input": {"file": spec.source, "sha256": spec.input_sha256, "lines": spec.input_lines},
            "engine": spec.engine.model_dump(),
            "defaults": spec.defaults.model_dump(),
            **spec.provenance,
            # Made through the Batch API (/v1): its request and the submitter's metadata.
            **({"batch": spec.batch.model_dump()} if spec.batch else {}),
            **({"metadata": spec.metadata} if spec.metadata else {}),
        }
    )
with st.expander("History and worker log"):
    st.table(pd.DataFrame(status.history).fillna(""))  # notes: only some entries
    st.code(job.log_tail(40) or "(no log yet)", language=None)
