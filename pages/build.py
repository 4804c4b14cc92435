"""Build: make a batch file from a table (CSV, Parquet, Excel) without writing code."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from core.check.sampling import RequestError
from core.check.tools import forced_tool
from core.config import SAMPLE_DATA
from core.files import file_sha256
from core.plan.builder import (
    AnySpec,
    BuildError,
    BuildResult,
    BuildSpec,
    build_file,
    default_id_column,
    default_text_column,
    default_user_template,
    dry_run,
    free_file_name,
    preview,
    read_table,
    safe_file_name,
)
from core.plan.drafts import BuildDraft, load_draft, save_draft, save_table
from core.plan.embed_builder import (
    DEFAULT_EMBEDDING_MODEL,
    ENCODING_FORMATS,
    MAX_ROWS_PER_LINE,
    EmbedSpec,
)
from core.plan.rerank_builder import RerankSpec
from ui.remembered import afresh, forget, remember, remembered, remembered_input
from ui.sign_in import signed_in_user
from ui.store import paths, through_app
from ui.text import escape

ROW_NUMBERS = "(row numbers)"
DRY_RUN_ROWS = 50_000  # larger tables are checked row by row when saved
INTRO = (
    "Pick a table, write a system prompt and a user prompt template with the table's "
    "columns as placeholders (`{{ column }}`, or `{{ row['column name'] }}`), check the "
    "first lines, and save the batch file. Then check it on *Upload & check*. Or make an "
    "embeddings batch: one column's texts, turned into vectors."
)
SOURCES = ["Upload a table", "Use the sample table"]
# Fields that name a table's columns or come from its name start afresh for another table
# (another name or other content): else its ids would be `tickets:1...` and its template
# another table's columns.
TABLE_FIELDS = (
    "build_id",
    "build_task",
    "build_user",
    "build_embed_column",
    "build_meta_columns",
    "build_rerank_query",
    "build_rerank_doc",
    "build_rerank_label",
    "build_file_name",
)
KINDS = ["Chat prompts", "Embeddings", "Rerank"]
KINDS_HELP = (
    "Chat prompts: /v1/chat/completions lines from templates. Embeddings: "
    "/v1/embeddings lines, one column's texts to turn into vectors. Rerank: /v1/rerank "
    "lines, one per query, from a table of (query, document) rows."
)


class Table(NamedTuple):
    """The table the batch is built from, its file's name and the SHA-256 of its bytes."""

    frame: pd.DataFrame
    name: str
    sha256: str


class Fields(NamedTuple):
    """The fields every kind of batch has: ids, task, prompt version (chats) and job id."""

    id_choice: str
    id_column: str | None  # None: row numbers
    task: str  # as typed
    prompt_version: str
    job_id: str


class Batch(NamedTuple):
    """What the fields describe: the builder's spec, and the task as typed (the file's name)."""

    spec: AnySpec
    task: str


def open_draft() -> str | None:
    """The signed-in user, whose draft fills the fields once per session."""
    # The draft is kept per user in the data folder (core.plan.drafts): a reload or a new
    # session starts from it.
    user = signed_in_user()
    if "build_draft_loaded" not in st.session_state:
        st.session_state["build_draft_loaded"] = True
        draft, draft_table = load_draft(user)
        for name, value in draft.fields.items():
            st.session_state.setdefault(f"kept::{name}", value)
        st.session_state["build_draft_table"] = draft.table_name
        if draft_table is not None and remembered("build_table", None) is None:
            remember("build_table", draft_table)
    return user


def pick_table(user: str | None) -> Table:
    """The table uploaded, the sample chosen, or the draft's; the page stops without one."""
    source = st.radio(
        "Table",
        SOURCES,
        index=SOURCES.index(remembered("build_source", SOURCES[0])),
        horizontal=True,
        key="build_source",
    )
    remember("build_source", source)
    table = read_source(source, user)
    if table is None and source == SOURCES[0] and remembered("build_table", None) is not None:
        table = Table(*remembered("build_table", None))  # the draft's table: the uploader forgets
        st.caption(f"The table of your draft, {escape(table.name)}; upload another to replace it.")
    if table is not None:
        remember("build_table", tuple(table))
    if table is None:
        st.info("Upload a table, or use the sample table, to build a batch file from it.")
        st.stop()
    return table


def read_source(source: str, user: str | None) -> Table | None:
    """The table of the source picked (None: none yet); one that cannot be read stops here."""
    try:
        return uploaded_table(user) if source == SOURCES[0] else sample_table()
    except BuildError as exc:
        st.error(escape(exc))
        st.stop()


def uploaded_table(user: str | None) -> Table | None:
    """The table uploaded, read once per upload and kept as the draft's table."""
    uploaded = st.file_uploader("CSV, Parquet or Excel (.xlsx)", type=["csv", "parquet", "xlsx"])
    if uploaded is None:
        return None
    read_before = remembered("build_table", (None, "", ""))
    if (
        uploaded.file_id == st.session_state.get("build_draft_upload")
        and read_before[1] == uploaded.name
    ):
        return Table(*read_before)  # read once, not again on each rerun
    data = uploaded.getvalue()
    table = Table(read_table(data, uploaded.name), uploaded.name, hashlib.sha256(data).hexdigest())
    if st.session_state.get("build_draft_upload") != uploaded.file_id:
        save_table(user, uploaded.name, uploaded.getvalue())  # the draft's table
        st.session_state["build_draft_upload"] = uploaded.file_id
        st.session_state["build_draft_table"] = uploaded.name
    return table


def sample_table() -> Table | None:
    """The sample table chosen."""
    samples = sorted(p.name for p in SAMPLE_DATA.glob("*.csv"))
    sample = st.selectbox("Sample table", samples, key="build_sample")
    if not sample:
        return None
    path = SAMPLE_DATA / sample
    return Table(read_table(path), sample, file_sha256(path))


def forget_another_tables_fields(table: Table) -> None:
    """Another table than the fields were filled for (another name, or the same name with
    other content): its own fields start afresh, and the file saved from the other is no
    longer the one this form saves."""
    filled_for = (
        remembered("build_fields_table", table.name),
        remembered("build_fields_sha256", table.sha256),
    )
    if filled_for != (table.name, table.sha256):
        forget(TABLE_FIELDS)
        st.session_state.pop("built_file", None)
        st.session_state.pop("built_summary", None)
    remember("build_fields_table", table.name)
    remember("build_fields_sha256", table.sha256)


def show_table(table: Table) -> None:
    """The table's name, size, columns and first rows."""
    st.caption(
        f"**{escape(table.name)}**: {len(table.frame):,} rows, columns: "
        + escape(", ".join(map(str, table.frame.columns)))
    )
    st.dataframe(table.frame.head(5), hide_index=True, width="stretch", key="table_head")


def batch_spec(table: Table) -> Batch:
    """The kind of batch and its fields (each kept for the session: leaving the page
    forgets nothing), as the builder's spec."""
    kind = remember(
        "build_kind",
        st.radio(
            "Batch of",
            KINDS,
            index=KINDS.index(remembered("build_kind", KINDS[0])),
            horizontal=True,
            key="build_kind",
            help=KINDS_HELP,
        ),
    )
    columns = list(table.frame.columns)
    fields = shared_fields(columns, table.name, chat=kind == KINDS[0])
    first_text = default_text_column(table.frame, fields.id_choice)  # never a timestamp
    if kind == "Rerank":
        return Batch(rerank_spec(columns, first_text, fields), fields.task)
    if kind == "Embeddings":
        return Batch(embed_spec(columns, first_text, fields), fields.task)
    return Batch(chat_spec(first_text, fields), fields.task)


def shared_fields(columns: list[str], table_name: str, chat: bool) -> Fields:
    """The row of fields every kind has, and a warning when row numbers are the ids."""
    ids = [ROW_NUMBERS, *columns]
    id_default = remembered("build_id", default_id_column(columns))
    id_default = afresh("build_id", id_default if id_default in ids else ids[0])
    c1, c2, c3, c4 = st.columns(4)
    id_choice = remember(
        "build_id",
        c1.selectbox("Id column", ids, index=ids.index(id_default), key="build_id"),
    )
    task = remembered_input(c2.text_input, "Task", Path(table_name).stem or "task", "build_task")
    prompt_version = ""
    if chat:
        prompt_version = remembered_input(c3.text_input, "Prompt version", "v1", "build_version")
    job_id = remembered_input(c4.text_input, "Job id (optional)", "", "build_job_id")
    id_column = None if id_choice == ROW_NUMBERS else id_choice
    if id_column is None:
        why = (
            "No column is named `id` or `*_id`, so each"
            if default_id_column(columns) is None
            else "Each"
        )
        st.warning(
            f"{why} line's custom_id is its row number ({escape(task.strip() or 'task')}:1, "
            f"{escape(task.strip() or 'task')}:2, ...). If a column holds the rows' ids, pick "
            "it under *Id column*: row numbers change when the table is sorted or filtered."
        )
    return Fields(id_choice, id_column, task, prompt_version, job_id)


def rerank_spec(columns: list[str], first_text: str, fields: Fields) -> RerankSpec:
    """A rerank batch: the query, document and label columns, the model and top_n."""
    query_column, document_column, label_column = rerank_columns(columns, first_text)
    c1, c2 = st.columns(2)
    model_name = remembered_input(c1.text_input, "body.model", "rerank-model", "build_rerank_model")
    top_n = remembered_input(c2.number_input, "top_n (0: all)", 0, "build_top_n", min_value=0)
    return RerankSpec(
        query_column=query_column,
        document_column=document_column,
        label_column=None if label_column == "(none)" else label_column,
        id_column=fields.id_column,
        task=fields.task.strip(),
        model=model_name.strip() or "rerank-model",
        top_n=int(top_n),
        job_id=fields.job_id.strip(),
    )


def rerank_columns(columns: list[str], first_text: str) -> tuple[str, str, str]:
    """The query, document and relevance label columns (the label's may be "(none)")."""
    c1, c2, c3 = st.columns(3)
    picked = [
        remembered(f"build_rerank_{n}", d) for n, d in (("query", columns[0]), ("doc", first_text))
    ]
    picked = [
        afresh(f"build_rerank_{n}", p if p in columns else columns[0])
        for n, p in zip(("query", "doc"), picked, strict=True)
    ]
    query_column = remember(
        "build_rerank_query",
        c1.selectbox(
            "Query column", columns, index=columns.index(picked[0]), key="build_rerank_query"
        ),
    )
    document_column = remember(
        "build_rerank_doc",
        c2.selectbox(
            "Document column", columns, index=columns.index(picked[1]), key="build_rerank_doc"
        ),
    )
    label_options = ["(none)", *columns]
    label_default = remembered("build_rerank_label", "(none)")
    label_default = afresh(
        "build_rerank_label", label_default if label_default in label_options else "(none)"
    )
    label_column = remember(
        "build_rerank_label",
        c3.selectbox(
            "Relevance label column (optional)",
            label_options,
            index=label_options.index(label_default),
            key="build_rerank_label",
            help="Numbers, 0 for not relevant: kept in metadata.relevance, so Results and "
            "Dashboards give the ranking's NDCG and MRR.",
        ),
    )
    return query_column, document_column, label_column


def embed_spec(columns: list[str], first_text: str, fields: Fields) -> EmbedSpec:
    """An embeddings batch: the column to embed, the model, rows per line, the encoding
    and the metadata."""
    text_default = remembered("build_embed_column", first_text)
    text_default = afresh(
        "build_embed_column", text_default if text_default in columns else columns[0]
    )
    text_column = remember(
        "build_embed_column",
        st.selectbox(
            "Column to embed",
            columns,
            index=columns.index(text_default),
            key="build_embed_column",
            help="Each row's cell is one input text; empty cells are left out.",
        ),
    )
    c1, c2, c3, c4 = st.columns(4)
    model_name = remembered_input(
        c1.text_input, "body.model", DEFAULT_EMBEDDING_MODEL, "build_embed_model"
    )
    rows_per_line = remembered_input(
        c2.number_input,
        "Rows per line",
        1,
        "build_rows_per_line",
        min_value=1,
        max_value=MAX_ROWS_PER_LINE,
        help="1: input is the row's text. N > 1: input is a list of N rows' texts (vector i "
        "of a result is row i of its line).",
    )
    encoding = encoding_format(c3)
    with_metadata = remembered_input(
        c4.checkbox,
        "Metadata in each body",
        True,
        "build_embed_metadata",
        help="body.metadata: task, source ids, job id and the columns chosen below (the "
        "Results map colours by them). vLLM ignores it; OpenAI's embeddings API does not "
        "know the field: turn it off for a file meant for OpenAI.",
    )
    meta_columns = metadata_columns(columns, text_column) if with_metadata else []
    return EmbedSpec(
        column=text_column,
        id_column=fields.id_column,
        task=fields.task.strip(),
        model=model_name.strip() or DEFAULT_EMBEDDING_MODEL,
        rows_per_line=int(rows_per_line),
        encoding_format=encoding,
        job_id=fields.job_id.strip(),
        metadata=bool(with_metadata),
        metadata_columns=meta_columns,
    )


def encoding_format(column: DeltaGenerator) -> str:
    """The vectors' encoding, in ``column``."""
    formats = list(ENCODING_FORMATS)
    return remember(
        "build_encoding",
        column.selectbox(
            "encoding_format",
            formats,
            index=formats.index(remembered("build_encoding", formats[0])),
            key="build_encoding",
            help="float: vectors as lists of numbers; base64: little-endian float32, "
            "a quarter of the text.",
        ),
    )


def metadata_columns(columns: list[str], text_column: str) -> list[str]:
    """The columns copied into each line's metadata (never the text embedded)."""
    meta_default = [
        c for c in remembered("build_meta_columns", []) if c in columns and c != text_column
    ]
    meta_default = afresh("build_meta_columns", meta_default)
    return remember(
        "build_meta_columns",
        st.multiselect(
            "Columns copied into metadata",
            [c for c in columns if c != text_column],
            default=meta_default,
            key="build_meta_columns",
        ),
    )


def chat_spec(first_text: str, fields: Fields) -> BuildSpec:
    """A chat batch: the system prompt, the user prompt's template and the sampling."""
    system_prompt = remembered_input(
        st.text_area,
        "System prompt",
        "You are a careful assistant. Answer in one sentence.",
        "build_system",
    )
    user_template = remembered_input(
        st.text_area,
        "User prompt template (Jinja2)",
        default_user_template(first_text),
        "build_user",
        height=140,
    )
    c1, c2, c3, c4 = st.columns(4)
    model_name = remembered_input(c1.text_input, "body.model", "gpt-4o-mini", "build_model")
    max_tokens = remembered_input(
        c2.number_input, "max_tokens", 256, "build_max_tokens", min_value=1, max_value=1_000_000
    )
    temperature = remembered_input(
        c3.number_input,
        "temperature",
        0.0,
        "build_temperature",
        min_value=0.0,
        max_value=2.0,
        step=0.1,
    )
    keep_empty = remembered_input(
        c4.checkbox, "Keep rows with empty cells", False, "build_keep_empty"
    )
    params = {"max_tokens": int(max_tokens), "temperature": float(temperature)}
    params.update(tool_call())
    return BuildSpec(
        user_template=user_template,
        system_prompt=system_prompt,
        id_column=fields.id_column,
        task=fields.task.strip(),
        model=model_name.strip() or "gpt-4o-mini",
        prompt_version=fields.prompt_version.strip(),
        job_id=fields.job_id.strip(),
        params=params,
        skip_empty=not keep_empty,
    )


def tool_call() -> dict[str, Any]:
    """The body fields that force a tool call, if asked for (else none); a function the
    tool fields cannot make stops the page."""
    if not remembered_input(
        st.checkbox, "Answer as a tool call (a function's arguments)", False, "build_tool"
    ):
        return {}
    tool_name = remembered_input(st.text_input, "Function name", "extract", "build_tool_name")
    tool_schema = remembered_input(
        st.text_area,
        "Its parameters: a JSON Schema of an object",
        '{"type": "object", "properties": {"summary": {"type": "string"}}, '
        '"required": ["summary"]}',
        "build_tool_schema",
        height=140,
    )
    try:
        return forced_tool(tool_name.strip(), tool_schema)
    except RequestError as exc:
        st.error(escape(exc))
        st.stop()


def keep_draft(user: str | None) -> None:
    """Saves the fields as the user's draft, when one changed since it was last saved."""
    draft = BuildDraft(
        fields={
            key.removeprefix("kept::"): value
            for key, value in st.session_state.items()
            if key.startswith("kept::build_") and key != "kept::build_table"
        },
        table_name=st.session_state.get("build_draft_table"),
    )
    if draft != st.session_state.get("build_draft_saved"):  # written when a field changed
        save_draft(user, draft)
        st.session_state["build_draft_saved"] = draft


def preview_section(table: Table, spec: AnySpec) -> None:
    """The first lines, and (for a table small enough) how many rows become lines and
    which rows have problems; a spec the builder refuses stops the page."""
    try:
        first = preview(table.frame, spec, rows=3)
        whole = dry_run(table.frame, spec) if len(table.frame) <= DRY_RUN_ROWS else None
    except BuildError as exc:
        st.error(escape(exc))
        st.stop()
    st.subheader("Preview")
    for line in first.lines:
        st.code(json.dumps(line, ensure_ascii=False, indent=1), language="json")
    if not first.lines:
        st.caption("None of the first rows renders into a line; see the problems below.")
    if whole is not None:
        in_lines = f" ({whole.line_count:,} lines)" if whole.line_count != whole.written else ""
        st.caption(f"{whole.written:,} of {whole.rows:,} rows become lines{in_lines}.")
    problems_table(whole or first)


def problems_table(report: BuildResult) -> None:
    """The rows with problems, each with its message; rows with errors are left out."""
    if report.problems:
        n = len(report.problems)
        rows_have = "row has" if n == 1 else "rows have"
        st.warning(f"{n} {rows_have} problems; rows with errors are left out.")
        st.dataframe(
            pd.DataFrame(
                [
                    {"row": p.row, "severity": p.severity, "message": p.message}
                    for p in report.problems
                ]
            ),
            hide_index=True,
            width="stretch",
            key="build_problems",
        )


def save_section(table: Table, batch: Batch) -> None:
    """The file's name and the Save button; what was saved is kept for the session."""
    target, replace = file_target(batch.task)
    if st.button("Save the batch file", type="primary", key="build_save"):
        try:
            result = build_file(table.frame, batch.spec, target, replace=replace)
        except BuildError as exc:  # a file of that name came meanwhile: asked again
            st.error(escape(exc))
            st.stop()
        st.session_state["built_file"] = str(target)
        in_lines = f" in {result.line_count:,} lines" if result.line_count != result.written else ""
        st.session_state["built_summary"] = (
            f"{result.written:,} of {result.rows:,} rows written{in_lines}"
        )


def file_target(task: str) -> tuple[Path, bool]:
    """Where the file is saved, and whether it replaces a file of that name."""
    default = afresh("build_file_name", safe_file_name(task or "batch"))
    file_name = st.text_input("File name", default, key="build_file_name")
    target = paths().uploads / safe_file_name(file_name)
    replace = False
    if target.exists():  # never overwritten without asking: a free name is offered instead
        free = free_file_name(paths().uploads, file_name)
        st.warning(
            f"A file named {escape(target.name)} is in the uploads folder already: saving "
            f"writes {escape(free)} instead, unless you replace it."
        )
        replace = st.checkbox(f"Replace {escape(target.name)}", key="build_replace")
        if not replace:
            target = target.with_name(free)
    return target, replace


def saved_file() -> None:
    """The file saved last: where it is, a download, and the way on to Upload & check."""
    built = st.session_state.get("built_file")
    if not (built and Path(built).is_file()):
        return
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


through_app()
st.title("Build a batch file")
st.caption(INTRO)
user = open_draft()
table = pick_table(user)
forget_another_tables_fields(table)
show_table(table)
batch = batch_spec(table)
keep_draft(user)
preview_section(table, batch.spec)
save_section(table, batch)
saved_file()
