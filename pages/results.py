"""Results: filter, search, sort and page through answers in DuckDB; details; an embedding
job's vectors (ui/vectors.py); export."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

import pandas as pd
import streamlit as st

from core.check.sensitive import phone_region_now
from core.plan.pricing import load_prices
from core.store import checks as ck
from core.store import costs as co
from core.store import export as ex
from core.store import results as res
from core.store import vectors as vec
from core.store.db import Store
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

PAGE_SIZES = [25, 50, 100, 500]
ANSWER_FIRST = ("custom_id", "answer", "prompt", "status")  # the table's first columns


class Chosen(NamedTuple):
    """The jobs in the table: the one chosen, the others added, and what the page needs of them."""

    job_id: str
    more: list[str]  # the other jobs added to the table
    job_ids: list[str]  # the chosen one first
    row: pd.Series  # the chosen job's row in the jobs list
    done: int  # the results of every job in view so far (a count is kept while it holds)
    embedding: bool  # the chosen job has vectors
    label: Callable[[str], str]


class View(NamedTuple):
    """The page of the table shown, how it is ordered and cut, and how many results match."""

    table: pd.DataFrame
    total: res.Total
    sort: str
    descending: bool
    size: int
    page_no: int
    signature: str  # the filter and the results so far: an exact count holds while it does


# -- the jobs ---------------------------------------------------------------------------------


def pick_jobs(db: Store) -> Chosen:
    """The job box and the other jobs added to the table; the page stops when there is no
    job yet, or none has the batch metadata chosen."""
    jobs = jobs_or_stop("No jobs yet. Check a batch file and start a run first.")
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
    by_id = jobs.set_index("job_id")
    job_ids = [job_id, *more]
    done = by_id.loc[job_ids, ["succeeded", "failed"]].fillna(0).to_numpy().sum()
    embedding = vec.job_dimensions(db, job_id) is not None
    return Chosen(job_id, more, job_ids, by_id.loc[job_id], int(done), embedding, label)


def summary(chosen: Chosen) -> None:
    """The chosen job's origin, state and counts, and its error."""
    job_origin(chosen.job_id)
    row = chosen.row
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


def filters(db: Store, chosen: Chosen) -> tuple[res.ResultFilter, list[str]]:
    """The filter and search box; returns the filter, and the metadata fields of these
    jobs' results (the table sorts by them)."""
    fresh_checks(chosen.job_ids, chosen.label)  # checks of results that came since
    facets = cached_facets(db, tuple(chosen.job_ids), db.data_version(chosen.job_ids))
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
        flt = filter_widgets(db, chosen.job_ids, facets)
    return flt, facets["metadata_keys"]


def filter_widgets(db: Store, job_ids: list[str], facets: dict) -> res.ResultFilter:
    """The search, the fields' filters and the checks' outcomes, as one filter."""
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
    metadata = metadata_filter(db, job_ids, facets["metadata_keys"], c[0], c[1])
    low = c[2].number_input("Tokens out ≥", min_value=0, value=None, step=1, key="f_tok_lo")
    high = c[3].number_input("Tokens out ≤", min_value=0, value=None, step=1, key="f_tok_hi")
    return res.ResultFilter(
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
        checks=check_filter(facets["checks"]),
    )


def metadata_filter(
    db: Store, job_ids: list[str], keys: list[str], key_at: Any, value_at: Any
) -> dict[str, str]:
    """A metadata field and the value it must have (in the columns ``key_at``, ``value_at``)."""
    meta_key = key_at.selectbox("Metadata field", ["(any)", *keys], key="f_meta_key")
    if meta_key == "(any)":
        return {}
    values = res.metadata_values(db, job_ids, meta_key)
    value = value_at.selectbox("equals", values, key="f_meta_value")
    return {meta_key: value} if value is not None else {}


def check_filter(rules: list[str]) -> dict[str, ck.Outcome]:
    """A rule of the Checks page and the outcome it must have, when these jobs were checked."""
    if not rules:
        return {}
    c = st.columns(4)
    if st.session_state.get("f_check") not in ["(any)", *rules]:
        st.session_state["f_check"] = "(any)"  # a rule of other jobs
    rule = c[0].selectbox("Check", ["(any)", *rules], key="f_check")
    outcome = c[1].selectbox("outcome", ck.FAILED_FIRST, key="f_check_outcome")
    return {rule: outcome} if rule != "(any)" else {}


# -- the table ----------------------------------------------------------------------------------


def pager(db: Store, chosen: Chosen, flt: res.ResultFilter, metadata_keys: list[str]) -> View:
    """Sort, rows per page and the page: the page of matching results, and their count."""
    c = st.columns([2, 1, 1, 1])
    sort_names = res.sort_options(metadata_keys)
    from_link = fill_from_link(
        {
            "sort": ("sort", One(sort_names)),
            "desc": ("descending", bool),
            "rows": ("page_size", One(PAGE_SIZES)),
            "page": ("page_no", int),
        }
    )
    sort = c[0].selectbox(
        "Sort by",
        sort_names,
        index=sort_names.index("line_no"),
        key="sort",
        help="Orders every matching result (in DuckDB), not only this page; missing values "
        "come last. metadata.KEY orders by one metadata field, as text.",
    )
    descending = c[1].toggle("Descending", key="descending")
    size = c[2].selectbox("Rows per page", PAGE_SIZES, index=1, key="page_size")

    def page(number: int) -> pd.DataFrame:
        return res.page(
            db, flt, sort=sort, descending=descending, limit=size, offset=(number - 1) * size
        )

    # The page is read first: a page that is not full also tells how many match, with no count.
    wanted = int(st.session_state.get("page_no") or 1)
    table = page(wanted)
    signature = json.dumps([flt.model_dump(mode="json"), chosen.done])
    total = matching(db, flt, signature, (wanted - 1) * size, size, len(table))
    if "page" in from_link and wanted > total.pages(size):  # past the last (fewer results now)
        not_valid(
            "page", str(wanted), "page 1 is shown", f"is past the last ({total.pages(size):,})"
        )
        st.session_state["page_no"] = wanted = 1
        table = page(1)
    page_no = c[3].number_input(
        "Page", min_value=1, max_value=total.pages(size), value=1, key="page_no"
    )
    if page_no != wanted:  # the pager went back to 1 (its range changed): show that page
        table = page(page_no)
    return View(table, total, sort, descending, size, page_no, signature)


def matching(
    db: Store, flt: res.ResultFilter, signature: str, offset: int, size: int, shown: int
) -> res.Total:
    """How many results match. A count without a search (and "Count all"'s) is kept while
    the filter and the jobs' results stay the same: a rerun does not count a million
    results again."""
    counted = st.session_state.get("results_exact_count")
    if counted and counted[0] == signature:
        return res.Total(counted[1])
    total = res.total(db, flt, offset=offset, limit=size, shown=shown)
    if total.exact and not flt.search:  # (a search's count stops at a cap: cheap)
        st.session_state["results_exact_count"] = (signature, total.n)
    return total


def listing(db: Store, chosen: Chosen, flt: res.ResultFilter, view: View) -> None:
    """The page of results as a table, with its count and cost; or why there is none."""
    if view.total.n == 0:
        if db.count_results(chosen.job_id) == 0:
            st.info(res.no_results_reason(open_job(chosen.job_id).read_status()))
        else:
            st.info("No results match these filters.")
        return
    first = (view.page_no - 1) * view.size + 1
    c = st.columns([4, 1])
    c[0].caption(f"{view.total} results (rows {first:,}–{first + len(view.table) - 1:,} shown)")
    if not view.total.exact and c[1].button(
        "Count all",
        key="count_all",
        help=f"A search counts its matches up to {res.SEARCH_COUNT_CAP:,}; counting them all "
        "reads every prompt and answer (a few tenths of a second per million results).",
    ):
        st.session_state["results_exact_count"] = (view.signature, res.count(db, flt))
        st.rerun()
    table = view.table
    if len(chosen.job_ids) == 1:
        shown = table.drop(columns=["job_id"])
    else:  # each row's job by its name, as the job boxes name it (not by id)
        shown = table.rename(columns={"job_id": "job"})
        shown["job"] = shown["job"].map(chosen.label)
    in_front = [c for c in ANSWER_FIRST if c in shown.columns]
    shown = shown[[*in_front, *(c for c in shown.columns if c not in in_front)]]  # the answer
    costs(db, flt, table, shown, len(in_front))
    st.dataframe(shown, hide_index=True, width="stretch")
    st.caption(
        "Clicking a column header orders only the rows of this page; **Sort by** above "
        "orders all matching results."
    )


def costs(
    db: Store, flt: res.ResultFilter, table: pd.DataFrame, shown: pd.DataFrame, at: int
) -> None:
    """Each request's cost as a column of ``shown`` (at ``at``), and the total of every
    result in view, where the price table has models (the one rule: core/store/costs.py)."""
    prices = load_prices()
    if not prices.models:
        return
    keys = list(zip(table["job_id"], table["custom_id"], strict=True))
    shown.insert(at, f"cost ({prices.currency})", co.each(db, keys, prices))
    clause, params = res.where(flt)
    in_view = co.total(db, clause, params, prices)
    st.caption(f"Cost of the {in_view.results:,} results in view: {escape(in_view)}")


# -- detail -------------------------------------------------------------------------------------


def details(db: Store, chosen: Chosen, table: pd.DataFrame) -> tuple[str, str] | None:
    """The box of the result whose details show, and its details; returns its (job, id)."""
    # One box per choice of jobs: a new choice starts at its own first result, never at
    # the position (and for a moment the id) the last one had.
    detail_key = f"detail_pick::{'|'.join(chosen.job_ids)}"
    keys = list(zip(table["job_id"], table["custom_id"], strict=True))
    link_item = linked("item") if detail_key not in st.session_state else []
    if link_item:  # a shared link to one result, on this page of the table or not
        wanted = (linked("item_job")[:1] or [chosen.job_id])[0], link_item[0]
        if wanted in keys or (wanted[0] in chosen.job_ids and res.detail(db, *wanted)):
            keys = [wanted, *(k for k in keys if k != wanted)]
            st.session_state[detail_key] = wanted
        else:
            not_here("result", [wanted[1]], "the details show the table's first result")
    one_job = len(chosen.job_ids) == 1
    pick = st.selectbox(
        "Details of",
        keys,
        format_func=lambda k: k[1] if one_job else f"{k[1]} ({chosen.label(k[0])})",
        key=detail_key,
    )
    item = res.detail(db, *pick) if pick is not None else None
    if item:
        left, right = st.columns(2)
        with left:
            request(item, chosen.embedding)
        with right:
            answer(item)
        with st.expander("Parameters and metadata"):
            st.json({"params": item["params"], "metadata": item["metadata"]})
        with st.expander("Raw output line"):
            st.code(json.dumps(item["raw"], ensure_ascii=False, indent=1), language="json")
    return pick


def request(item: dict[str, Any], embedding: bool) -> None:
    """What was asked: an embedding job's inputs, or the conversation."""
    if embedding:  # body.input: a text, or a list of them (token ids: numbers)
        st.subheader("Input")
        inputs = item["messages"]
        for i, text in enumerate(inputs if isinstance(inputs, list) else [inputs]):
            st.caption(f"input {i}")
            st.text(text if isinstance(text, str) else json.dumps(text))
    else:
        st.subheader("Conversation")
        show_conversation(st, item["messages"], item.get("prompt"))


def answer(item: dict[str, Any]) -> None:
    """The answer (or the error), its ranking if any, and a line of its figures."""
    st.subheader("Answer")
    if item["status"] == "failed":
        st.error(escape(f"{item['error_code']}: {item['error_message']}"))
    else:
        if item.get("tool_calls"):
            st.caption("Tool calls: the function and its arguments, one call a line")
        st.text(item["shown_answer"] or "")
        show_ranked_documents(item["raw"], item["metadata"], item.get("params"))  # a ranking
    st.caption(
        f"status {item['status']} · finish {item['finish_reason']} · "
        f"tokens in {item['prompt_tokens']} / out {item['completion_tokens']} · "
        f"latency {res.latency_text(item['latency_ms'])} · model {item['model']}"
    )
    if reused := res.reused_text(item["raw"]):
        st.caption(escape(reused))


def address(
    chosen: Chosen, flt: res.ResultFilter, view: View, pick: tuple[str, str] | None
) -> dict[str, Any]:
    """What the address holds to open this view again: the jobs, the filter, the result
    in detail."""
    return {
        "job": chosen.job_id,
        "and": chosen.more,
        "q": flt.search,
        "case": flt.match_case,
        "status": flt.statuses,
        "finish": flt.finish_reasons,
        "model": flt.models,
        "version": flt.prompt_versions,
        "sort": view.sort if view.sort != "line_no" else None,
        "desc": view.descending,
        "rows": view.size if view.size != 50 else None,
        "page": view.page_no if view.page_no > 1 else None,
        "item": pick[1] if pick else None,
        "item_job": pick[0] if pick and pick[0] != chosen.job_id else None,
    }


def kind_views(db: Store, chosen: Chosen, table: pd.DataFrame) -> None:
    """What a job's kind adds: an embedding job's vectors, a ranking's quality."""
    if chosen.embedding:
        on_page = list(dict.fromkeys(table.loc[table["job_id"] == chosen.job_id, "custom_id"]))
        folder = open_job(chosen.job_id).read_spec().vectors_folder
        show_vectors(db, chosen.job_id, folder, on_page)
    show_ranking_quality(db, chosen.job_ids, "results_rank")  # labelled rerank and score lines


# -- export -----------------------------------------------------------------------------------


def export(db: Store, flt: res.ResultFilter, chosen: Chosen) -> None:
    """The export of the filtered results, then the job's own output and error files."""
    st.subheader("Export")
    export_section(db, flt, chosen.job_id)
    downloads(db, chosen)


@st.fragment
def export_section(db: Store, flt: res.ResultFilter, job_id: str) -> None:
    """The export of the filtered results; choosing a format reruns only this part."""
    c = st.columns([1, 2])
    fmt = c[0].selectbox("Format", ex.FORMATS, key="export_format")
    c[1].caption(
        "The filtered results with their review labels. JSONL is the OpenAI batch output "
        f"format. Excel takes at most {ex.EXCEL_MAX_ROWS:,} rows."
    )
    redact = c[1].checkbox(
        "Redact sensitive data",
        key="export_redact",
        help="E-mail addresses, phone and card numbers, IBANs, IP addresses and credentials "
        "in every text of the file become placeholders such as [EMAIL_1]; phone numbers "
        "without a country code are read as the studio's region (Settings, Sensitive data).",
    )
    too_many = fmt == "xlsx" and res.count(db, flt) > ex.EXCEL_MAX_ROWS  # for Excel only

    def write_export() -> bytes:
        """Runs when the button is clicked, on the filter shown then (never a stale file)."""
        with ex.export_folder(paths().home) as folder:  # this click's own file
            target = folder / f"{job_id}_results.{fmt}"
            ex.export_results(db, flt, target, fmt, redact, phone_region_now(paths().home))
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


def downloads(db: Store, chosen: Chosen) -> None:
    """The job's output file, and its error file when a request failed."""
    job_id = chosen.job_id
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
    if not int(chosen.row["failed"] or 0):
        return

    def write_errors() -> bytes:
        """Written from DuckDB when clicked (opening the page does no export work)."""
        with ex.export_folder(paths().home) as folder:
            errors = folder / f"{job_id}_errors.jsonl"
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


through_app()
st.title("Results")
db = store()
chosen = pick_jobs(db)
summary(chosen)
flt, metadata_keys = filters(db, chosen)
view = pager(db, chosen, flt, metadata_keys)
listing(db, chosen, flt, view)
pick = details(db, chosen, view.table) if view.total.n else None
write_link(address(chosen, flt, view, pick))  # the address opens this view again
kind_views(db, chosen, view.table)
export(db, flt, chosen)
