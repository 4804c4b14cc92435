"""Build: make a batch file from a table (CSV, Parquet, Excel) without writing code."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from core.config import SAMPLE_DATA
from core.plan.builder import (
    BuildError,
    BuildSpec,
    build_file,
    dry_run,
    preview,
    read_table,
    safe_file_name,
)
from pages.shared import escape, paths, through_app

ROW_NUMBERS = "(row numbers)"
DRY_RUN_ROWS = 50_000  # larger tables are checked row by row when saved

through_app()
st.title("Build a batch file")
st.caption(
    "Pick a table, write a system prompt and a user prompt template with the table's "
    "columns as placeholders (`{{ column }}`, or `{{ row['column name'] }}`), check the "
    "first lines, and save the batch file. Then check it on *Upload & check*."
)

source = st.radio(
    "Table", ["Upload a table", "Use the sample table"], horizontal=True, key="build_source"
)
table: pd.DataFrame | None = None
table_name = ""
try:
    if source == "Upload a table":
        uploaded = st.file_uploader(
            "CSV, Parquet or Excel (.xlsx)", type=["csv", "parquet", "xlsx"]
        )
        if uploaded is not None:
            table, table_name = read_table(uploaded.getvalue(), uploaded.name), uploaded.name
    else:
        samples = sorted(p.name for p in SAMPLE_DATA.glob("*.csv"))
        sample = st.selectbox("Sample table", samples, key="build_sample")
        if sample:
            table, table_name = read_table(SAMPLE_DATA / sample), sample
except BuildError as exc:
    st.error(escape(exc))
    st.stop()

if table is None:
    st.info("Upload a table, or use the sample table, to build a batch file from it.")
    st.stop()

st.caption(
    f"**{escape(table_name)}**: {len(table):,} rows, columns: "
    + escape(", ".join(map(str, table.columns)))
)
st.dataframe(table.head(5), hide_index=True, width="stretch", key="table_head")

columns = list(table.columns)
c1, c2, c3, c4 = st.columns(4)
id_choice = c1.selectbox("Id column", [ROW_NUMBERS, *columns], key="build_id")
task = c2.text_input("Task", value=Path(table_name).stem or "task", key="build_task")
prompt_version = c3.text_input("Prompt version", value="v1", key="build_version")
job_id = c4.text_input("Job id (optional)", key="build_job_id")
system_prompt = st.text_area(
    "System prompt", "You are a careful assistant. Answer in one sentence.", key="build_system"
)
first_text = next((c for c in columns if c != id_choice), columns[0])
user_template = st.text_area(
    "User prompt template (Jinja2)",
    f"{{{{ {first_text} }}}}" if first_text.isidentifier() else f"{{{{ row['{first_text}'] }}}}",
    height=140,
    key="build_user",
)
c1, c2, c3, c4 = st.columns(4)
model_name = c1.text_input("body.model", "gpt-4o-mini", key="build_model")
max_tokens = c2.number_input("max_tokens", 1, 1_000_000, 256, key="build_max_tokens")
temperature = c3.number_input("temperature", 0.0, 2.0, 0.0, 0.1, key="build_temperature")
keep_empty = c4.checkbox("Keep rows with empty cells", key="build_keep_empty")

spec = BuildSpec(
    user_template=user_template,
    system_prompt=system_prompt,
    id_column=None if id_choice == ROW_NUMBERS else id_choice,
    task=task.strip(),
    model=model_name.strip() or "gpt-4o-mini",
    prompt_version=prompt_version.strip(),
    job_id=job_id.strip(),
    params={"max_tokens": int(max_tokens), "temperature": float(temperature)},
    skip_empty=not keep_empty,
)

try:
    first = preview(table, spec, rows=3)
    whole = dry_run(table, spec) if len(table) <= DRY_RUN_ROWS else None
except BuildError as exc:
    st.error(escape(exc))
    st.stop()

st.subheader("Preview")
for line in first.lines:
    st.code(json.dumps(line, ensure_ascii=False, indent=1), language="json")
if not first.lines:
    st.caption("None of the first rows renders into a line; see the problems below.")

report = whole or first
if whole is not None:
    st.caption(f"{whole.written:,} of {whole.rows:,} rows become lines.")
if report.problems:
    n = len(report.problems)
    rows_have = "row has" if n == 1 else "rows have"
    st.warning(f"{n} {rows_have} problems; rows with errors are left out.")
    st.dataframe(
        pd.DataFrame(
            [{"row": p.row, "severity": p.severity, "message": p.message} for p in report.problems]
        ),
        hide_index=True,
        width="stretch",
        key="build_problems",
    )

file_name = st.text_input("File name", safe_file_name(task or "batch"), key="build_file_name")
if st.button("Save the batch file", type="primary", key="build_save"):
    target = paths().uploads / safe_file_name(file_name)
    result = build_file(table, spec, target)
    st.session_state["built_file"] = str(target)
    st.session_state["built_summary"] = f"{result.written:,} of {result.rows:,} rows written"

built = st.session_state.get("built_file")
if built and Path(built).is_file():
    st.success(f"Saved {escape(Path(built).name)}: {st.session_state.get('built_summary', '')}.")
    c1, c2 = st.columns(2)
    c1.download_button(
        "Download the batch file",
        Path(built).read_bytes(),
        file_name=Path(built).name,
        mime="application/jsonl",
        key="build_download",
    )
    if c2.button("Check it on Upload & check", key="build_to_check"):
        st.session_state["source"] = "A file on the server"
        st.session_state["server_path"] = built
        st.switch_page("pages/upload.py")
