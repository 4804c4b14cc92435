"""Results: the answers of a job, read from DuckDB, and its output file."""

from __future__ import annotations

import streamlit as st

from core.jobs import JobFolder
from pages.shared import paths, store

st.title("Results")

db = store()
db.ingest_all(paths().jobs)
jobs = db.jobs()
if jobs.empty:
    st.info("No jobs yet. Check a batch file and start a run first.")
    st.page_link("pages/upload.py", label="Upload & check", icon=":material/upload_file:")
    st.stop()

ids = list(jobs["job_id"])
current = st.session_state.get("job_id")
job_id = st.selectbox(
    "Job",
    ids,
    index=ids.index(current) if current in ids else 0,
    format_func=lambda j: f"{j} · {jobs.set_index('job_id').at[j, 'source']}",
)
row = jobs.set_index("job_id").loc[job_id]
cols = st.columns(4)
cols[0].metric("State", row["state"])
cols[1].metric("Requests", int(row["total"] or 0))
cols[2].metric("Succeeded", int(row["succeeded"] or 0))
cols[3].metric("Failed", int(row["failed"] or 0))
if row["error"]:
    st.error(row["error"])

results = db.results(job_id)
st.caption(f"{db.count_results(job_id)} results (first {len(results)} shown)")
st.dataframe(results, hide_index=True, width="stretch")

job = JobFolder(paths().jobs / job_id)
if job.output.exists():
    st.download_button(
        "Download output JSONL",
        data=job.output.read_bytes(),
        file_name=f"{job_id}_output.jsonl",
        mime="application/jsonl",
    )
