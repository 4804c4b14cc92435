"""Upload & check: pick a batch file and see, line by line, whether it can run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from core.checks import check_file
from core.config import SAMPLE_DATA
from core.uploads import save_upload
from pages.shared import paths

st.title("Upload & check")
st.caption(
    "A batch file has one JSON request per line: `custom_id`, `method`, `url`, `body` "
    "(the OpenAI batch format). Nothing runs until you start it on the Run page."
)

source = st.radio("Batch file", ["Upload a file", "Use a sample"], horizontal=True, key="source")
path: Path | None = None
display_name = ""
if source == "Upload a file":
    uploaded = st.file_uploader("OpenAI batch JSONL", type=["jsonl", "json", "txt"])
    if uploaded is not None:
        saved = st.session_state.setdefault("saved_uploads", {})
        if uploaded.file_id not in saved:
            saved[uploaded.file_id] = str(
                save_upload(paths().uploads, uploaded.name, uploaded.getvalue())
            )
        path = Path(saved[uploaded.file_id])
        display_name = uploaded.name
else:
    samples = sorted(p.name for p in SAMPLE_DATA.glob("*.jsonl"))
    name = st.selectbox("Sample batch", samples, key="sample_name")
    path = SAMPLE_DATA / name if name else None
    display_name = name or ""

if path is None:
    st.info("Upload a batch JSONL file, or pick one of the samples, to check it.")
    st.stop()

report = check_file(path)
cols = st.columns(4)
cols[0].metric("Lines", report.lines)
cols[1].metric("Valid", report.valid)
cols[2].metric("Invalid", report.invalid)
cols[3].metric("Warnings", report.warnings)

if report.problems:
    st.subheader("Problems")
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "line": p.line,
                    "severity": p.severity,
                    "custom_id": p.custom_id,
                    "message": p.message,
                }
                for p in report.problems
            ]
        ),
        hide_index=True,
        width="stretch",
    )

if report.ok:
    st.success(f"All {report.valid} lines are valid.")
elif report.valid:
    st.warning(
        f"{report.invalid} of {report.lines} lines are invalid. Fix them, or run the valid "
        "lines and give each invalid one an error result."
    )
else:
    st.error("No line of this file can run. Fix the problems above and upload it again.")

if report.valid:
    st.session_state["batch_file"] = str(path)
    st.session_state["batch_name"] = display_name
    st.page_link("pages/run.py", label="Continue to Run", icon=":material/arrow_forward:")
else:
    st.session_state.pop("batch_file", None)
