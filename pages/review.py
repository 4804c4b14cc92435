"""Review: draw a sample of results, label each item, and follow progress and pass rate."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import streamlit as st

from core.human import owners as ow
from core.human import queues as qu
from core.store import agreement as ag
from core.store import export as ex
from core.store import review as rv
from core.store import samples as sm
from core.store import training as tr
from core.store.db import Store
from core.store.results import ResultFilter, facets
from ui.jobs import job_labels, jobs_or_stop
from ui.links import (
    One,
    fill_from_link,
    linked,
    linked_job_notice,
    open_linked_job,
    open_linked_position,
)
from ui.review_panel import (
    TABS,
    hold_queue,
    label_panel,
    link_review,
    load_labels,
    own_labels_editor,
    schema_editor,
)
from ui.sign_in import new_sample_owner, reviewer_name, sample_user
from ui.store import paths, store, through_app
from ui.text import escape

EXPORTS = ["Sample with labels", "All labels", "Review tallies per job"]
# Training data from the sample's labels: one format each (core.store.training).
TRAINING = {
    "Fine-tuning file (OpenAI chat JSONL)": "sft",
    "Dataset (Parquet folder with its card, zipped)": "dataset",
}


class Arrival(NamedTuple):
    """How the page was opened: by a link's ``?job=`` (Results, Monitor, a bookmark), and
    the page's job then."""

    from_link: bool
    job_id: str | None


# -- a new sample -------------------------------------------------------------------------------


def new_sample(db: Store, ids: list[str], label: Callable[[str], str]) -> Arrival:
    """The New sample form, open when there is no sample yet or a link names a job."""
    # A link's ?job=: a new sample of that job, its form open.
    from_link = "review_jobs" not in st.session_state and bool(linked("job"))
    open_linked_job(ids, "review_jobs")
    current = st.session_state.get("job_id")
    opened = sm.list_samples(db).empty or (from_link and current in linked("job"))
    with st.expander("New sample", expanded=opened), st.form("new_sample"):
        sample_form(db, ids, current, label)
    return Arrival(from_link, current)


def sample_form(
    db: Store, ids: list[str], current: str | None, label: Callable[[str], str]
) -> None:
    """The jobs, method, size, seed, strata and statuses of a sample, and its drawing."""
    job_ids = st.multiselect(  # the job of the link or chosen on another page, else the newest
        "Jobs",
        ids,
        default=[current if current in ids else ids[0]],
        format_func=label,
        key="review_jobs",
    )
    linked_job_notice("review_jobs", job_ids[0] if job_ids else "")
    c = st.columns(4)
    method = c[0].selectbox("Method", sm.METHODS, key="sample_method")
    size = c[1].number_input("Size", 1, sm.MAX_SIZE, 50, key="sample_size")
    seed = c[2].number_input("Seed", 0, 2**31 - 1, 0, key="sample_seed")
    keys = facets(db, job_ids)["metadata_keys"] if job_ids else []
    stratify = c[3].selectbox(
        "Stratify by (stratified)",
        [*sm.STRATA, *[f"metadata:{k}" for k in keys]],
        key="sample_strata",
    )
    status = st.multiselect("Only these statuses", ["succeeded", "failed"])
    name = st.text_input("Sample name", key="sample_name")
    if st.form_submit_button("Draw sample"):
        definition = sm.SampleDefinition(
            filter=ResultFilter(job_ids=job_ids, statuses=status),
            method=method,
            size=int(size),
            seed=int(seed),
            stratify_by=stratify if method == "stratified" else None,
        )
        draw_sample(db, name, definition)


def draw_sample(db: Store, name: str, definition: sm.SampleDefinition) -> None:
    """Draws and saves a sample, then opens it on its first item; or says why not. Where
    sign-in is on, the signed-in user is its owner (``core.human.owners``)."""
    try:
        made = sm.create_sample(db, name, definition, owner=new_sample_owner())
    except sm.SampleError as exc:
        st.error(escape(exc))
    else:
        st.session_state["sample_id"] = made.sample_id
        st.session_state["review_pos"] = 0
        st.success(f"Sample {escape(made.name)} drawn: {made.size} items.")


# -- the sample ---------------------------------------------------------------------------------


def pick_sample(db: Store, arrival: Arrival) -> str:
    """The Sample box (a link's sample, else the newest of a link's job); the page stops
    when there is no sample yet."""
    samples = sm.list_samples(db)
    if samples.empty:
        st.info("No samples yet: draw one above.")
        st.stop()
    sample_ids = list(samples["sample_id"])
    names = dict(zip(samples["sample_id"], samples["name"], strict=True))
    # A shared link or a bookmark: its sample, item (from 1) and tab, in a session new to them.
    fill_from_link({"sample": ("sample_id", One(sample_ids)), "tab": ("review_tab", One(TABS))})
    if arrival.from_link and "sample_id" not in st.session_state:
        of_job = sm.samples_of_job(samples, arrival.job_id)
        if of_job:
            st.session_state["sample_id"] = of_job[0]  # the link's job's newest sample
    chosen = st.session_state.get("sample_id")
    sample_id = st.selectbox(
        "Sample",
        sample_ids,
        index=sample_ids.index(chosen) if chosen in sample_ids else 0,
        format_func=lambda s: f"{names[s]} ({s})",
    )
    if sample_id != chosen:
        st.session_state["sample_id"] = sample_id
        st.session_state["review_pos"] = 0
    return sample_id


def open_sample(db: Store, sample_id: str, label: Callable[[str], str]) -> pd.DataFrame:
    """A caption of how the sample was drawn; returns its items (the page stops when the
    sample cannot be read)."""
    try:
        sample = sm.get_sample(db, sample_id)
    except sm.SampleError as exc:  # the other samples stay one choice away
        st.error(escape(exc))
        st.stop()
    d = sample.definition
    st.caption(
        f"{sample.size} items · {d.method}"
        + (f" by {d.stratify_by}" if d.stratify_by else "")
        + f" · seed {d.seed} · jobs {', '.join(escape(label(j)) for j in d.filter.job_ids)}"
    )
    items = sm.sample_items(db, sample_id)
    open_linked_position("item", "review_pos", len(items))
    return items


# -- the tabs -----------------------------------------------------------------------------------


def tabs(db: Store, sample_id: str, items: pd.DataFrame, reviewer: str | None) -> None:
    """Review, Statistics and Export; only the open tab runs (each switch reruns the
    page: its figures are fresh)."""
    tab_review, tab_stats, tab_export = st.tabs(TABS, key="review_tab", on_change="rerun")
    link_review(sample_id, len(items))  # the panel writes its item as it moves
    if tab_review.open:
        with tab_review:
            labelling(db, sample_id, items, reviewer)
    if tab_stats.open:
        with tab_stats:
            statistics(db, sample_id, items, reviewer)
    if tab_export.open:
        with tab_export:
            export(db, sample_id)


def labelling(db: Store, sample_id: str, items: pd.DataFrame, reviewer: str | None) -> None:
    """The reviewer's own labels and the labelling panel, once a name is entered."""
    if not reviewer:
        st.info("Enter your name above to start labelling.")
        return
    refused = owner_line(db, sample_id)
    queue = queue_editor(db, sample_id, reviewer, refused)
    schema = schema_editor(db, sample_id, reviewer, refused)
    if queue is not None:
        if reviewer not in queue.reviewers:
            st.info(
                f"This sample's items are shared out among {escape(', '.join(queue.reviewers))}"
                " (Queue, above); add your name there to get a share."
            )
            return
        everything = len(items)
        items = rv.queue_items(db, queue, items, reviewer)
        st.caption(
            f"Your queue: {len(items)} of the sample's {everything} items, each reviewed by "
            f"{queue.overlap} of {len(queue.reviewers)} reviewers; skipped items come last."
        )
        hold_queue(sample_id, reviewer, items)
    own = own_labels_editor(db, reviewer)
    load_labels(db, sample_id, reviewer)
    label_panel(db, sample_id, items, reviewer, own, queued=queue is not None, schema=schema)


def owner_line(db: Store, sample_id: str) -> str | None:
    """Where sign-in is on: the sample's owner, and for an admin a form to name another;
    returns why this user may not change the sample's schema, guidelines and queue (None:
    they may; ``core.human.owners``)."""
    who, sign_in = sample_user()
    if not sign_in:
        return None
    owner = ow.owner_of(db.human_dir, sample_id)
    st.caption(
        escape(
            f"Owner: {owner}"
            if owner
            else "No owner recorded: anyone may change its schema, guidelines and queue "
            "until an admin names one."
        )
    )
    if ow.set_owner_refusal(who, sign_in) is None:  # the one rule (core.human.owners)
        with st.expander("Name the owner (admins)"), st.form("sample_owner"):
            named = st.text_input("Owner's sign-in email", owner or "", max_chars=ow.OWNER_CHARS)
            if st.form_submit_button("Set the owner"):
                try:
                    ow.record_owner(db.human_dir, sample_id, named, who.user)
                except ow.OwnerError as exc:
                    st.error(escape(exc))
                else:
                    st.rerun()
    return ow.change_refusal(db.human_dir, sample_id, who, sign_in)


def queue_editor(
    db: Store, sample_id: str, reviewer: str, refused: str | None = None
) -> qu.Queue | None:
    """The sample's queue: who reviews it and how many of them review each item; set or
    changed here by its owner or an admin, read-only with ``refused`` (why) for anyone
    else. Returns it (None: everyone reviews every item)."""
    queue = qu.queue_of(db.human_dir, sample_id)
    title = (
        f"Queue: {len(queue.reviewers)} reviewers, {queue.overlap} per item"
        if queue
        else "Queue (share the items out among reviewers)"
    )
    with st.expander(escape(title)), st.form("queue"):
        if refused:
            st.caption(escape(refused))
        names = st.text_area(
            "Reviewers, comma-separated or one a line",
            ", ".join(queue.reviewers) if queue else "",
            max_chars=qu.MAX_REVIEWERS * (qu.REVIEWER_CHARS + 2),
            disabled=bool(refused),
        )
        overlap = st.number_input(
            "Reviews per item (overlap)",
            1,
            qu.MAX_REVIEWERS,
            queue.overlap if queue else 2,
            disabled=bool(refused),
        )
        if st.form_submit_button("Save the queue", disabled=bool(refused)) and not refused:
            try:
                queue = qu.set_queue(db.human_dir, sample_id, names, int(overlap), reviewer)
            except qu.QueueError as exc:
                st.error(escape(exc))
            else:
                st.session_state["review_pos"] = 0
                st.rerun()
    return queue


def statistics(db: Store, sample_id: str, items: pd.DataFrame, reviewer: str | None) -> None:
    """The pass rate of all reviewers, each reviewer's progress (in the queue, where the
    sample has one), and their agreement."""
    everyone = rv.pass_rate(db, sample_id)
    st.metric(
        "Pass rate, all reviewers", f"{everyone.rate:.0%}" if everyone.rate is not None else "–"
    )
    st.caption(escape(everyone.describe()))  # own label names are text
    people = rv.reviewers(db, sample_id)
    if people:
        st.dataframe(rv.reviewer_rows(db, sample_id, people), hide_index=True)
    queue = qu.queue_of(db.human_dir, sample_id)
    if queue is not None:
        st.subheader("Queue")
        keys = list(zip(items["job_id"], items["custom_id"], strict=True))
        st.dataframe(rv.queue_rows(db, queue, keys), hide_index=True)
    agreement(db, sample_id, people, reviewer)


def agreement(db: Store, sample_id: str, people: list[str], reviewer: str | None) -> None:
    """Krippendorff's alpha per question and per pair, two reviewers side by side, and the
    items they differ on with their adjudication."""
    st.subheader("Agreement")
    found = ag.sample_agreement(db, sample_id)
    problem = found.problem()
    if problem:
        st.info(escape(problem))
        return
    st.caption(
        "Krippendorff's alpha over every reviewer: 1 is full agreement, 0 agreement at chance; "
        "about 0.8 or more is often read as reliable. Verdicts and single choices are "
        "nominal, scores and ratings ordinal, multiple choices sets compared by the MASI "
        "distance (sets that share options partly agree); the interval is a 95% bootstrap "
        "over items (seed 0)."
    )
    for column, got in zip(st.columns(len(found.questions)), found.questions, strict=True):
        column.metric(f"{got.question} α", "–" if got.alpha is None else f"{got.alpha:.2f}")
        column.caption(escape(got.describe()))  # a problem can quote a label: text
    st.dataframe(
        found.pairs.drop(columns=[f"{a.question} α" for a in found.questions]), hide_index=True
    )
    with st.expander("Two reviewers' verdicts side by side"):
        side_by_side(db, sample_id, people)
    disagreements(db, sample_id, found.disagreements, reviewer)


def side_by_side(db: Store, sample_id: str, people: list[str]) -> None:
    """Two reviewers' verdicts on the items both labelled, as a table."""
    c = st.columns(2)
    a = c[0].selectbox("Reviewer A", people, index=0, key="agree_a")
    b = c[1].selectbox("Reviewer B", people, index=1, key="agree_b")
    if a == b:
        return
    agree = rv.agreement(db, a, b, sample_id)
    if agree.items:
        st.write(
            f"Both labelled **{agree.items}** items; they agree on {agree.agreed} "
            f"({agree.observed:.0%})."
        )
        st.dataframe(agree.table)
    else:
        st.info("These two reviewers have no item in common yet.")


def disagreements(db: Store, sample_id: str, differ: pd.DataFrame, reviewer: str | None) -> None:
    """The items whose reviewers' verdicts differ, and the final label an owner sets."""
    st.subheader(f"Disagreements ({len(differ)})")
    if differ.empty:
        st.caption("Every item labelled by several reviewers has one verdict.")
        return
    st.dataframe(differ, hide_index=True)  # labels and names are text in a table
    keys = list(zip(differ["job_id"], differ["custom_id"], differ["item"], strict=True))
    job_id, custom_id, _ = st.selectbox(
        "Item to adjudicate",
        keys,
        format_func=lambda k: f"item {k[2]} · {k[1]}",
        key="adjudicate_item",
    )
    refused = ow.change_refusal(db.human_dir, sample_id, *sample_user())
    if not reviewer:
        st.info("Enter your name above to set an item's final label.")
    elif refused:
        st.caption(escape(refused))
    else:
        with st.form("adjudicate"):
            verdict = st.radio(
                "Final label",
                ag.final_choices(db, job_id, custom_id),
                format_func=escape,  # a reviewer's own label is text
                horizontal=True,
            )
            note = st.text_input("Why (kept in the item's history)", max_chars=500)
            if st.form_submit_button("Set final label"):
                try:
                    ag.adjudicate(db, job_id, custom_id, verdict, reviewer, note, sample_id)
                except rv.ReviewError as exc:
                    st.error(escape(exc))
                else:
                    st.rerun()  # the table shows it
    st.caption("The item's history: every reviewer's label and every final label set.")
    st.dataframe(rv.label_history(db, job_id, custom_id), hide_index=True)


def export(db: Store, sample_id: str) -> None:
    """An export of the sample with its labels, of all labels, of the tallies, or of the
    sample's training data."""
    what = st.radio("What", [*EXPORTS, *TRAINING], horizontal=True)
    if what in TRAINING:
        st.caption(
            "Fine-tuning file: the items whose reviewers all said pass, with the request's "
            "messages and the answer (a corrected answer where a reviewer gave one). "
            "Dataset: every item with its labels, for Hugging Face `datasets`."
        )
    else:
        fmt = st.selectbox("Format", ex.FORMATS, key="review_export_format")
    if not st.button("Prepare export", key="review_export"):
        return
    try:
        with ex.export_folder(paths().home) as folder:  # this session's own file
            if what in TRAINING:
                name, data, outcome = tr.download(db, sample_id, TRAINING[what], folder)
                counted = outcome.counted()
                st.info(escape(f"{counted}; left out: {outcome.reasons()}"))
            else:
                target, n = export_file(db, sample_id, what, fmt, folder)
                name, data, counted = target.name, target.read_bytes(), f"{n:,} rows"
    except ex.ExportError as exc:
        st.error(escape(exc))
    else:
        st.download_button(f"Download {name} ({counted})", data, name)


def export_file(db: Store, sample_id: str, what: str, fmt: str, folder: Path) -> tuple[Path, int]:
    """Writes the export ``what`` (one of :data:`EXPORTS`) into ``folder``; returns the
    file and its rows."""
    if what == "Sample with labels":
        target = folder / f"{sample_id}.{fmt}"
        return target, ex.export_sample(db, sample_id, target, fmt)
    if what == "All labels":
        target = folder / f"labels.{fmt}"
        return target, ex.export_labels(db, target, fmt)
    target = folder / f"review_tally.{fmt}"
    return target, ex.export_tally(db, target, fmt)


through_app()
st.title("Review")
jobs = jobs_or_stop("No jobs yet. Run a batch first; then sample its results here.")
db = store()
label = job_labels()
reviewer = reviewer_name("Your name (labels are kept per reviewer)")
arrival = new_sample(db, list(jobs["job_id"]), label)
sample_id = pick_sample(db, arrival)
items = open_sample(db, sample_id, label)
tabs(db, sample_id, items, reviewer)
