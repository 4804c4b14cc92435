"""Results: filter, search, sort and page through answers in DuckDB; details; an embedding
job's vectors (ui/vectors.py); export."""

from __future__ import annotations

import json

import streamlit as st

from core.plan.pricing import cost_text, load_prices, priced_total, token_cost, tokens_cost
from core.schemas import JobState, JobStatus
from core.store import checks as ck
from core.store import export as ex
from core.store import results as res
from core.store import vectors as vec
from ui.grading import fresh_checks
from ui.jobs import job_labels, job_origin, jobs_or_stop, jobs_with_metadata, open_job
from ui.links import (
    One,
    fill_from_link,
    linked,
    linked_job_notice,
    not_here,
    not_valid,
    open_linked_job,
    write_link,
)
from ui.ranking import show_ranked_documents, show_ranking_quality
from ui.store import paths, store, through_app
from ui.text import escape, show_conversation
from ui.vectors import show_vectors

through_app()
st.title("Results")

jobs = jobs_or_stop("No jobs yet. Check a batch file and start a run first.")
db = store()

by_id = jobs.set_index("job_id")
ids = jobs_with_metadata(list(jobs["job_id"]), key="results_metadata")
if not ids:
    st.info("No job has all these metadata; remove one.")
    st.stop()
open_linked_job(ids, "results_job")  # a shared link or a bookmark
current = st.session_state.get("job_id")
label = job_labels()
job_id = st.selectbox(
    "Job",
    ids,
    index=ids.index(current) if current in ids else 0,
    format_func=label,
    key="results_job",
)
st.session_state["job_id"] = job_id
linked_job_notice("results_job", job_id)  # the other pages follow the job chosen here
others = [j for j in ids if j != job_id]
fill_from_link({"and": ("results_more_jobs", others)})
more = st.multiselect(
    "Add other jobs to the table",
    others,
    format_func=label,
    key="results_more_jobs",
)
job_ids = [job_id, *more]

job_origin(job_id)
row = by_id.loc[job_id]
has_vectors = vec.job_dimensions(db, job_id) is not None  # an embedding job
cols = st.columns(4)
cols[0].metric("State", row["state"])
cols[1].metric("Requests", int(row["total"] or 0))
cols[2].metric("Succeeded", int(row["succeeded"] or 0))
cols[3].metric("Failed", int(row["failed"] or 0))
if row["error"]:
    st.error(escape(row["error"]))

# -- filters ----------------------------------------------------------------------------------


@st.cache_data(max_entries=32, show_spinner=False)
def cached_facets(_db: object, job_ids: tuple[str, ...], version: tuple) -> dict:
    """The filters' values, once per state of the index (five scans of every result)."""
    return res.facets(_db, list(job_ids))


fresh_checks(job_ids, label)  # checks of results that came since, in the background
facets = cached_facets(db, tuple(job_ids), db.data_version(job_ids))
fill_from_link(
    {
        "q": ("q", None),
        "case": ("match_case", bool),
        "status": ("f_status", facets["statuses"]),
        "finish": ("f_finish", facets["finish_reasons"]),
        "model": ("f_model", facets["models"]),
        "version": ("f_version", facets["prompt_versions"]),
    }
)
with st.expander("Filter and search", expanded=True):
    search = st.text_input("Search prompts and answers (text is matched literally)", key="q")
    c = st.columns([2, 1])
    search_in = c[0].radio(
        "Search in", res.SEARCH_FIELDS, horizontal=True, key="search_in", index=2
    )
    match_case = c[1].checkbox("Match case", key="match_case")
    c = st.columns(4)
    statuses = c[0].multiselect("Status", facets["statuses"], key="f_status")
    finish = c[1].multiselect("Finish reason", facets["finish_reasons"], key="f_finish")
    models = c[2].multiselect("Model", facets["models"], key="f_model")
    versions = c[3].multiselect("Prompt version", facets["prompt_versions"], key="f_version")
    c = st.columns(4)
    meta_key = c[0].selectbox(
        "Metadata field", ["(any)", *facets["metadata_keys"]], key="f_meta_key"
    )
    metadata = {}
    if meta_key != "(any)":
        values = res.metadata_values(db, job_ids, meta_key)
        value = c[1].selectbox("equals", values, key="f_meta_value")
        if value is not None:
            metadata = {meta_key: value}
    low = c[2].number_input("Tokens out ≥", min_value=0, value=None, step=1, key="f_tok_lo")
    high = c[3].number_input("Tokens out ≤", min_value=0, value=None, step=1, key="f_tok_hi")
    checks = {}
    if facets["checks"]:  # the rules of the Checks page, when these jobs were checked
        c = st.columns(4)
        if st.session_state.get("f_check") not in ["(any)", *facets["checks"]]:
            st.session_state["f_check"] = "(any)"  # a rule of other jobs
        rule = c[0].selectbox("Check", ["(any)", *facets["checks"]], key="f_check")
        outcome = c[1].selectbox("outcome", ck.FAILED_FIRST, key="f_check_outcome")
        if rule != "(any)":
            checks = {rule: outcome}

flt = res.ResultFilter(
    job_ids=job_ids,
    statuses=statuses,
    finish_reasons=finish,
    models=models,
    prompt_versions=versions,
    metadata=metadata,
    completion_tokens=(low, high),
    search=search,
    search_in=search_in,
    match_case=match_case,
    checks=checks,
)


def _no_results(status: JobStatus) -> str:
    """Why a job shows no result: one that ended wrote none, and none will come."""
    if status.interrupted:
        return (
            "This job's worker stopped before any request had a result. Resume (on Jobs or "
            "Monitor) runs its requests; their results appear here as the worker writes them."
        )
    if status.state == JobState.COMPLETED:
        return "This job completed without a result: its input had no request to run."
    if status.state == JobState.CANCELLED:
        return (
            "This job was cancelled before any request had a result, so it has none. "
            "Resume (on Jobs or Monitor) runs its requests."
        )
    if status.state == JobState.EXPIRED:
        return "This job's completion window ended before any request ran: it has no result."
    if status.is_final:
        return "This job failed before any request had a result; the Monitor says why."
    return "This job has no results yet. They appear here as the worker writes them."


# -- the table ----------------------------------------------------------------------------------
c = st.columns([2, 1, 1, 1])
sort_names = res.sort_options(facets["metadata_keys"])
sizes = [25, 50, 100, 500]
from_link = fill_from_link(
    {
        "sort": ("sort", One(sort_names)),
        "desc": ("descending", bool),
        "rows": ("page_size", One(sizes)),
        "page": ("page_no", int),
    }
)
sort = c[0].selectbox(
    "Sort by",
    sort_names,
    index=sort_names.index("line_no"),
    key="sort",
    help="Orders every matching result (in DuckDB), not only this page; missing values come "
    "last. metadata.KEY orders by one metadata field, as text.",
)
descending = c[1].toggle("Descending", key="descending")
size = c[2].selectbox("Rows per page", sizes, index=1, key="page_size")
# The page is read first: a page that is not full also tells how many match, with no count.
wanted = int(st.session_state.get("page_no") or 1)
table = res.page(db, flt, sort=sort, descending=descending, limit=size, offset=(wanted - 1) * size)
# A count without a search (and "Count all"'s) is kept while the filter and the jobs' results stay
# the same: a rerun does not count a million results again.
done = by_id.loc[job_ids, ["succeeded", "failed"]].fillna(0).to_numpy().sum()
signature = json.dumps([flt.model_dump(mode="json"), int(done)])
counted = st.session_state.get("results_exact_count")
if counted and counted[0] == signature:
    total = res.Total(counted[1])
else:
    total = res.total(db, flt, offset=(wanted - 1) * size, limit=size, shown=len(table))
    if total.exact and not flt.search:  # (a search's count stops at a cap: cheap)
        st.session_state["results_exact_count"] = (signature, total.n)
if "page" in from_link and wanted > total.pages(size):  # past the last (fewer results now)
    not_valid("page", str(wanted), "page 1 is shown", f"is past the last ({total.pages(size):,})")
    st.session_state["page_no"] = wanted = 1
    table = res.page(db, flt, sort=sort, descending=descending, limit=size, offset=0)
page_no = c[3].number_input(
    "Page", min_value=1, max_value=total.pages(size), value=1, key="page_no"
)
if page_no != wanted:  # the pager went back to 1 (its range changed): show that page
    table = res.page(
        db, flt, sort=sort, descending=descending, limit=size, offset=(page_no - 1) * size
    )

pick = None  # the result whose details show
if total.n == 0:
    if db.count_results(job_id) == 0:
        st.info(_no_results(open_job(job_id).read_status()))
    else:
        st.info("No results match these filters.")
else:
    first = (page_no - 1) * size + 1
    c = st.columns([4, 1])
    c[0].caption(f"{total} results (rows {first:,}–{first + len(table) - 1:,} shown)")
    if not total.exact and c[1].button(
        "Count all",
        key="count_all",
        help=f"A search counts its matches up to {res.SEARCH_COUNT_CAP:,}; counting them all "
        "reads every prompt and answer (a few tenths of a second per million results).",
    ):
        st.session_state["results_exact_count"] = (signature, res.count(db, flt))
        st.rerun()
    shown = table.drop(columns=["job_id"]) if len(job_ids) == 1 else table
    first = [c for c in ("custom_id", "answer", "prompt", "status") if c in shown.columns]
    shown = shown[[*first, *(c for c in shown.columns if c not in first)]]  # the answer in view
    prices = load_prices()
    if prices.models:  # each request's cost, and the total of every result in view
        tokens = table[["prompt_tokens", "completion_tokens"]].fillna(0)
        costs = [
            token_cost(prices, model, *row)
            for model, row in zip(table["model"], tokens.itertuples(index=False), strict=True)
        ]
        shown.insert(len(first), f"cost ({prices.currency})", [cost_text(c) for c in costs])
        totals = res.token_totals(db, flt)
        spent, priced, unpriced = tokens_cost(
            prices, totals[["model", "prompt_tokens", "completion_tokens"]].itertuples(index=False)
        )
        left_out = f"; no token price for {', '.join(unpriced)}" if unpriced else ""
        st.caption(
            f"Cost of the {int(totals['results'].sum()):,} results in view: "
            f"{priced_total(spent, priced, prices.currency)}{escape(left_out)}"
        )
    st.dataframe(shown, hide_index=True, width="stretch")
    st.caption(
        "Clicking a column header orders only the rows of this page; **Sort by** above "
        "orders all matching results."
    )

    # -- detail -------------------------------------------------------------------------------
    # One box per choice of jobs: a new choice starts at its own first result, never at
    # the position (and for a moment the id) the last one had.
    detail_key = f"detail_pick::{'|'.join(job_ids)}"
    keys = list(zip(table["job_id"], table["custom_id"], strict=True))
    link_item = linked("item") if detail_key not in st.session_state else []
    if link_item:  # a shared link to one result, on this page of the table or not
        wanted = (linked("item_job")[:1] or [job_id])[0], link_item[0]
        if wanted in keys or (wanted[0] in job_ids and res.detail(db, *wanted)):
            keys = [wanted, *(k for k in keys if k != wanted)]
            st.session_state[detail_key] = wanted
        else:
            not_here("result", [wanted[1]], "the details show the table's first result")
    pick = st.selectbox(
        "Details of",
        keys,
        format_func=lambda k: k[1] if len(job_ids) == 1 else f"{k[1]} ({label(k[0])})",
        key=detail_key,
    )
    item = res.detail(db, *pick) if pick is not None else None
    if item:
        left, right = st.columns(2)
        with left:
            if has_vectors:  # body.input: a text, or a list of them (token ids: numbers)
                st.subheader("Input")
                inputs = item["messages"]
                for i, text in enumerate(inputs if isinstance(inputs, list) else [inputs]):
                    st.caption(f"input {i}")
                    st.text(text if isinstance(text, str) else json.dumps(text))
            else:
                st.subheader("Conversation")
                show_conversation(st, item["messages"], item.get("prompt"))
        with right:
            st.subheader("Answer")
            if item["status"] == "failed":
                st.error(escape(f"{item['error_code']}: {item['error_message']}"))
            else:
                if item.get("tool_calls"):
                    st.caption("Tool calls: the function and its arguments, one call a line")
                st.text(item["shown_answer"] or "")
                show_ranked_documents(
                    item["raw"], item["metadata"], item.get("params")
                )  # a ranking
            st.caption(
                f"status {item['status']} · finish {item['finish_reason']} · "
                f"tokens in {item['prompt_tokens']} / out {item['completion_tokens']} · "
                f"latency {res.latency_text(item['latency_ms'])} · model {item['model']}"
            )
        with st.expander("Parameters and metadata"):
            st.json({"params": item["params"], "metadata": item["metadata"]})
        with st.expander("Raw output line"):
            st.code(json.dumps(item["raw"], ensure_ascii=False, indent=1), language="json")

# The address opens this view again: the jobs, the filter and the result in detail.
write_link(
    {
        "job": job_id,
        "and": more,
        "q": search,
        "case": match_case,
        "status": statuses,
        "finish": finish,
        "model": models,
        "version": versions,
        "sort": sort if sort != "line_no" else None,
        "desc": descending,
        "rows": size if size != 50 else None,
        "page": page_no if page_no > 1 else None,
        "item": pick[1] if pick else None,
        "item_job": pick[0] if pick and pick[0] != job_id else None,
    }
)

# -- vectors (an embedding job) ---------------------------------------------------------------
if has_vectors:
    on_page = list(dict.fromkeys(table.loc[table["job_id"] == job_id, "custom_id"]))
    show_vectors(db, job_id, open_job(job_id).read_spec().vectors_folder, on_page)

show_ranking_quality(db, job_ids, "results_rank")  # labelled rerank and score lines only


# -- export -----------------------------------------------------------------------------------
@st.fragment
def export_section(flt: res.ResultFilter, job_id: str) -> None:
    """The export of the filtered results; choosing a format reruns only this part."""
    c = st.columns([1, 2])
    fmt = c[0].selectbox("Format", ex.FORMATS, key="export_format")
    c[1].caption(
        "The filtered results with their review labels. JSONL is the OpenAI batch output "
        f"format. Excel takes at most {ex.EXCEL_MAX_ROWS:,} rows."
    )
    too_many = fmt == "xlsx" and res.count(db, flt) > ex.EXCEL_MAX_ROWS  # for Excel only

    def write_export() -> bytes:
        """Runs when the button is clicked, on the filter shown then (never a stale file)."""
        target = paths().home / "exports" / f"{job_id}_results.{fmt}"
        ex.export_results(db, flt, target, fmt)
        return target.read_bytes()

    st.download_button(
        f"Export {fmt.upper()}",
        data=write_export,
        file_name=f"{job_id}_results.{fmt}",
        disabled=too_many,
        key="export_go",
        on_click="ignore",  # a download needs no rerun of the page
    )
    if too_many:
        st.caption(
            f"Excel takes at most {ex.EXCEL_MAX_ROWS:,} rows: narrow the filter, or use CSV."
        )


st.subheader("Export")
export_section(flt, job_id)

job = open_job(job_id)
c = st.columns(2)
if job.output.exists():
    c[0].download_button(
        "Download output JSONL",
        data=job.output.read_bytes,  # read when clicked, not on every rerun of the page
        file_name=f"{job_id}_output.jsonl",
        mime="application/jsonl",
        on_click="ignore",
    )
failed = int(row["failed"] or 0)
if failed:

    def write_errors() -> bytes:
        """Written from DuckDB when clicked (opening the page does no export work)."""
        errors = paths().home / "exports" / f"{job_id}_errors.jsonl"
        ex.export_errors(db, [job_id], errors)
        return errors.read_bytes()

    c[1].download_button(
        "Download error file",
        data=write_errors,
        file_name=f"{job_id}_errors.jsonl",
        mime="application/jsonl",
        key="errors_go",
        on_click="ignore",
    )
