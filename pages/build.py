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
    default_id_column,
    dry_run,
    preview,
    read_table,
    safe_file_name,
)
from pages.shared import drafted, escape, keep, kept, paths, through_app

ROW_NUMBERS = "(row numbers)"
DRY_RUN_ROWS = 50_000  # larger tables are checked row by row when saved

through_app()
st.title("Build a batch file")
st.caption(
    "Pick a table, write a system prompt and a user prompt template with the table's "
    "columns as placeholders (`{{ column }}`, or `{{ row['column name'] }}`), check the "
    "first lines, and save the batch file. Then check it on *Upload & check*."
)

SOURCES = ["Upload a table", "Use the sample table"]
source = st.radio(
    "Table",
    SOURCES,
    index=SOURCES.index(kept("build_source", SOURCES[0])),
    horizontal=True,
    key="build_source",
)
keep("build_source", source)
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

if table is None and source == "Upload a table" and kept("build_table", None) is not None:
    table, table_name = kept("build_table", None)  # the draft's table: the uploader forgets
    st.caption(f"The table of your draft, {escape(table_name)}; upload another to replace it.")
if table is not None:
    keep("build_table", (table, table_name))
if table is None:
    st.info("Upload a table, or use the sample table, to build a batch file from it.")
    st.stop()

st.caption(
    f"**{escape(table_name)}**: {len(table):,} rows, columns: "
    + escape(", ".join(map(str, table.columns)))
)
st.dataframe(table.head(5), hide_index=True, width="stretch", key="table_head")

# Every field of the draft is kept for the session: leaving the page forgets nothing.
columns = list(table.columns)
ids = [ROW_NUMBERS, *columns]
id_default = kept("build_id", default_id_column(columns))
c1, c2, c3, c4 = st.columns(4)
id_choice = keep(
    "build_id",
    c1.selectbox(
        "Id column", ids, index=ids.index(id_default) if id_default in ids else 0, key="build_id"
    ),
)
task = drafted(c2.text_input, "Task", Path(table_name).stem or "task", "build_task")
prompt_version = drafted(c3.text_input, "Prompt version", "v1", "build_version")
job_id = drafted(c4.text_input, "Job id (optional)", "", "build_job_id")
system_prompt = drafted(
    st.text_area,
    "System prompt",
    "You are a careful assistant. Answer in one sentence.",
    "build_system",
)
first_text = next((c for c in columns if c != id_choice), columns[0])
user_default = (
    f"{{{{ {first_text} }}}}" if first_text.isidentifier() else f"{{{{ row['{first_text}'] }}}}"
)
user_template = drafted(
    st.text_area, "User prompt template (Jinja2)", user_default, "build_user", height=140
)
c1, c2, c3, c4 = st.columns(4)
model_name = drafted(c1.text_input, "body.model", "gpt-4o-mini", "build_model")
max_tokens = drafted(
    c2.number_input, "max_tokens", 256, "build_max_tokens", min_value=1, max_value=1_000_000
)
temperature = drafted(
    c3.number_input,
    "temperature",
    0.0,
    "build_temperature",
    min_value=0.0,
    max_value=2.0,
    step=0.1,
)
keep_empty = drafted(c4.checkbox, "Keep rows with empty cells", False, "build_keep_empty")

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
    st.caption("It is on the server at:")
    st.code(built, language=None)
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
