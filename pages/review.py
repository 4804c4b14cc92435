"""Review: draw a sample of results, label each item, and follow progress and pass rate."""

from __future__ import annotations

import streamlit as st

from core.store import export as ex
from core.store import review as rv
from core.store import samples as sm
from core.store.results import ResultFilter, facets
from pages.shared import (
    escape,
    job_labels,
    jobs_or_stop,
    paths,
    reviewer_name,
    show_conversation,
    store,
    through_app,
)

through_app()
st.title("Review")

jobs = jobs_or_stop("No jobs yet. Run a batch first; then sample its results here.")
db = store()
label = job_labels()

reviewer = reviewer_name("Your name (labels are kept per reviewer)")

# -- a new sample -------------------------------------------------------------------------------
with st.expander("New sample", expanded=sm.list_samples(db).empty), st.form("new_sample"):
    ids, current = list(jobs["job_id"]), st.session_state.get("job_id")
    job_ids = st.multiselect(  # the job chosen on another page, else the newest
        "Jobs", ids, default=[current if current in ids else ids[0]], format_func=label
    )
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
        try:
            made = sm.create_sample(db, name, definition)
        except sm.SampleError as exc:
            st.error(escape(exc))
        else:
            st.session_state["sample_id"] = made.sample_id
            st.session_state["review_pos"] = 0
            st.success(f"Sample {escape(made.name)} drawn: {made.size} items.")

samples = sm.list_samples(db)
if samples.empty:
    st.info("No samples yet: draw one above.")
    st.stop()
sample_ids = list(samples["sample_id"])
names = dict(zip(samples["sample_id"], samples["name"], strict=True))
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

tab_review, tab_stats, tab_export = st.tabs(["Label", "Progress & agreement", "Export"])

with tab_review:
    if not reviewer:
        st.info("Enter your name above to start labelling.")
    else:
        done, total = rv.progress(db, sample_id, reviewer)
        st.progress(done / total if total else 0.0, text=f"{done} of {total} labelled")
        pos = min(st.session_state.get("review_pos", 0), len(items) - 1)
        nav = st.columns([1, 1, 1, 3])
        if nav[0].button("Previous", disabled=pos == 0, key="prev", shortcut="Left"):
            pos -= 1
        if nav[1].button("Next", disabled=pos >= len(items) - 1, key="next", shortcut="Right"):
            pos += 1
        if nav[2].button("Next unlabelled", key="next_open", shortcut="N"):
            for i in range(len(items)):
                j = (pos + 1 + i) % len(items)
                item = items.iloc[j]
                if rv.get_label(db, item["job_id"], item["custom_id"], reviewer) is None:
                    pos = j
                    break
        st.session_state["review_pos"] = pos
        item = items.iloc[pos]
        nav[3].markdown(f"**Item {pos + 1} of {len(items)}** · {escape(item['custom_id'])}")
        left, right = st.columns(2)
        left.subheader("Conversation")
        show_conversation(left, item["messages"], item["prompt"])
        right.subheader("Answer")
        right.caption(
            escape(
                f"{item['status']} · finish {item['finish_reason']} · "
                f"{item['completion_tokens']} tokens"
            )
        )
        if item["status"] == "failed":
            right.error(escape(item["error_message"] or "failed"))
        else:
            if isinstance(item.get("tool_calls"), str):  # NULL reads as NaN
                right.caption("Tool calls: the function and its arguments, one call a line")
            right.text(item["answer"] or "")
        old = rv.get_label(db, item["job_id"], item["custom_id"], reviewer)
        key = f"{sample_id}_{pos}"
        with st.form(f"label_{key}"):
            c = st.columns([1, 2])
            score = c[0].pills(
                "Score (optional)", [1, 2, 3, 4, 5], default=old.score if old else None
            )
            tags = c[1].text_input("Tags (comma-separated)", ", ".join(old.tags) if old else "")
            comment = st.text_area("Comment", old.comment if old else "", height=68)
            corrected = st.text_area(
                "Corrected answer (optional)", old.corrected_answer if old else "", height=68
            )
            st.caption("The verdict saves the label and moves on: keys P, F and U.")
            chosen = None
            buttons = st.columns(len(rv.VERDICTS))
            for column, verdict in zip(buttons, rv.VERDICTS, strict=True):
                current = old is not None and old.verdict == verdict
                if column.form_submit_button(
                    verdict.capitalize(),
                    type="primary" if current else "secondary",
                    shortcut=verdict[0].upper(),
                    width="stretch",
                ):
                    chosen = verdict
            if chosen is not None:
                try:
                    rv.save_label(
                        db,
                        item["job_id"],
                        item["custom_id"],
                        reviewer,
                        rv.Label(chosen, score, rv.parse_tags(tags), comment, corrected),
                        sample_id,
                    )
                except rv.ReviewError as exc:
                    st.error(escape(exc))
                else:
                    st.session_state["review_pos"] = min(pos + 1, len(items) - 1)
                    st.rerun()
        if old:
            st.caption(f"You labelled this item: {old.verdict}.")
        history = rv.label_history(db, item["job_id"], item["custom_id"])
        if len(history) > 1:
            with st.expander(f"Label history of this item ({len(history)} saves)"):
                st.dataframe(history, hide_index=True)

with tab_stats:
    everyone = rv.pass_rate(db, sample_id)
    st.metric(
        "Pass rate, all reviewers", f"{everyone.rate:.0%}" if everyone.rate is not None else "–"
    )
    st.caption(everyone.describe())
    people = rv.reviewers(db, sample_id)
    if people:
        rows = []
        for person in people:
            done, total = rv.progress(db, sample_id, person)
            rate = rv.pass_rate(db, sample_id, person)
            rows.append(
                {"reviewer": person, "labelled": done, "of": total, "pass rate": rate.describe()}
            )
        st.dataframe(rows, hide_index=True)
    if len(people) >= 2:
        c = st.columns(2)
        a = c[0].selectbox("Reviewer A", people, index=0, key="agree_a")
        b = c[1].selectbox("Reviewer B", people, index=1, key="agree_b")
        if a != b:
            agree = rv.agreement(db, a, b, sample_id)
            if agree.items:
                kappa = f"{agree.kappa:.2f}" if agree.kappa is not None else "–"
                st.write(
                    f"Both labelled **{agree.items}** items; they agree on {agree.agreed} "
                    f"({agree.observed:.0%}); Cohen's kappa **{kappa}**."
                )
                st.dataframe(agree.table)
            else:
                st.info("These two reviewers have no item in common yet.")
    else:
        st.caption("Agreement appears when two reviewers have labelled the same items.")

with tab_export:
    fmt = st.selectbox("Format", ex.FORMATS, key="review_export_format")
    what = st.radio(
        "What", ["Sample with labels", "All labels", "Review tallies per job"], horizontal=True
    )
    if st.button("Prepare export", key="review_export"):
        folder = paths().home / "exports"
        try:
            if what == "Sample with labels":
                target = folder / f"{sample_id}.{fmt}"
                n = ex.export_sample(db, sample_id, target, fmt)
            elif what == "All labels":
                target = folder / f"labels.{fmt}"
                n = ex.export_labels(db, target, fmt)
            else:
                target = folder / f"review_tally.{fmt}"
                n = ex.export_tally(db, target, fmt)
        except ex.ExportError as exc:
            st.error(escape(exc))
        else:
            st.download_button(
                f"Download {target.name} ({n:,} rows)", target.read_bytes(), target.name
            )
