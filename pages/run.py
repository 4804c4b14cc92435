"""Run: start the checked batch file on the local engine and watch it move."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from core.checks import check_file
from core.engine import EngineConfig
from core.jobs import JobFolder, create_job, start_worker
from core.models import ModelError, check_model_folder, model_folders
from core.requests import JobDefaults
from pages.shared import paths, store

st.title("Run")

batch_file = st.session_state.get("batch_file")
if not batch_file or not Path(batch_file).is_file():
    st.info("Check a batch file first; then come back here to run it.")
    st.page_link("pages/upload.py", label="Upload & check", icon=":material/upload_file:")
    st.stop()

report = check_file(batch_file)
st.write(
    f"**{st.session_state.get('batch_name', Path(batch_file).name)}**: {report.valid} valid "
    f"of {report.lines} lines"
)

CUSTOM = "Another folder…"
folders = model_folders()
choice = st.selectbox(
    "Model",
    [str(f) for f in folders] + [CUSTOM],
    format_func=lambda p: Path(p).name or p,
    key="model_choice",
)
model_path = st.text_input("Model folder", key="model_path") if choice == CUSTOM else choice

with st.expander("Defaults for fields a request leaves out"):
    c1, c2 = st.columns(2)
    max_tokens = c1.number_input(
        "Max output tokens", 1, 32768, JobDefaults.max_tokens, key="default_max_tokens"
    )
    temperature = c2.number_input(
        "Temperature", 0.0, 2.0, JobDefaults.temperature, step=0.1, key="default_temperature"
    )
skip_invalid = False
if report.invalid:
    skip_invalid = st.checkbox(
        f"Run the {report.valid} valid lines; the {report.invalid} invalid ones get an error "
        "result",
        key="skip_invalid",
    )

if st.button("Start run", type="primary", disabled=bool(report.invalid and not skip_invalid)):
    try:
        model = check_model_folder(model_path)
    except ModelError as exc:
        st.error(str(exc))
        st.stop()
    job = create_job(
        batch_file,
        paths().jobs,
        EngineConfig(model=str(model)),
        JobDefaults(max_tokens=int(max_tokens), temperature=float(temperature)),
        skip_invalid=skip_invalid,
        source=st.session_state.get("batch_name"),
    )
    start_worker(job)
    st.session_state["job_id"] = job.job_id


def show_status(job: JobFolder) -> None:
    status = job.read_status()
    state = "interrupted" if status.interrupted else status.state
    st.progress(status.progress, text=f"{state}: {status.done} / {status.total} requests")
    cols = st.columns(4)
    cols[0].metric("Succeeded", status.succeeded)
    cols[1].metric("Failed", status.failed)
    cols[2].metric("Output tokens", status.completion_tokens)
    cols[3].metric("Elapsed", f"{status.elapsed_seconds or 0:.0f} s")
    if status.message:
        st.caption(status.message)
    if status.error:
        st.error(status.error)
    if status.is_final or status.interrupted:
        store().ingest(job)
        if st.session_state.get("shown_final") != job.job_id:
            st.session_state["shown_final"] = job.job_id
            st.rerun()  # stop the live refresh: the page now shows the final state


job_id = st.session_state.get("job_id")
if job_id:
    job = JobFolder(paths().jobs / job_id)
    st.subheader(f"Job {job_id}")
    final = job.read_status().is_final
    st.fragment(run_every=None if final else 1.0)(show_status)(job)
    if final:
        st.page_link("pages/results.py", label="Open results", icon=":material/table_view:")
