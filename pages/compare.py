"""Compare: two jobs (or two slices of one job) side by side, a word diff, and preferences."""

from __future__ import annotations

import streamlit as st

from core.store import compare as cmp
from core.store.results import facets
from ui.jobs import job_labels, jobs_or_stop, open_job
from ui.judging import pairwise_section
from ui.links import One, fill_from_link, open_linked_position, write_link
from ui.page_cache import fresh_or_recent
from ui.sign_in import reviewer_name
from ui.store import store, through_app
from ui.text import escape, show_conversation

through_app()
st.title("Compare")

jobs = jobs_or_stop(
    "No jobs yet. Run two batches (or one with two prompt versions) to compare them."
)
db = store()

ids = list(jobs["job_id"])
labelled = job_labels()
MODES = {"jobs": "Two jobs", "slices": "Two slices of one job"}  # in the address: the key
fill_from_link(  # a shared link or a bookmark; the address follows what is shown
    {
        "mode": ("cmp_mode", One(MODES)),
        "a": ("cmp_a", One(ids)),
        "b": ("cmp_b", One(ids)),
        "job": ("cmp_job", One(ids)),
    }
)
mode = st.radio("Compare", list(MODES), format_func=MODES.get, horizontal=True, key="cmp_mode")
link: dict = {"mode": mode if mode != "jobs" else None}
if mode == "jobs":
    if len(ids) < 2:
        write_link(link)
        st.info("There is only one job. Run another, or compare two slices of this one.")
        st.stop()
    c = st.columns(2)
    job_a = c[0].selectbox("A", ids, index=1, format_func=labelled, key="cmp_a")
    job_b = c[1].selectbox("B", ids, index=0, format_func=labelled, key="cmp_b")
    link |= {"a": job_a, "b": job_b}
    side_a, side_b, key = cmp.Side(job_a), cmp.Side(job_b), "custom_id"
    differ = cmp.job_differences(db, open_job(job_a).read_spec(), open_job(job_b).read_spec())
    st.markdown("**What differs between A and B**")
    if differ.empty:
        st.caption("The same models, prompt versions, request parameters and settings.")
    else:  # names and values come from files: a table shows them as text
        st.dataframe(differ, hide_index=True, width="stretch", key="cmp_differ")
else:
    job = st.selectbox("Job", ids, format_func=labelled, key="cmp_job")
    meta = [f"metadata:{k}" for k in facets(db, [job])["metadata_keys"]]
    c = st.columns(4)
    fill_from_link({"split": ("cmp_field", One([*cmp.SPLIT_FIELDS, *meta]))})
    field = c[0].selectbox("Split by", [*cmp.SPLIT_FIELDS, *meta], key="cmp_field")
    values = cmp.split_values(db, job, field)
    link |= {"job": job, "split": field}
    if len(values) < 2:
        write_link(link)
        st.info(f"{escape(field)} has fewer than two values in this job; choose another field.")
        st.stop()
    fill_from_link(
        {"va": ("cmp_va", One(values)), "vb": ("cmp_vb", One(values)), "on": ("cmp_key", One(meta))}
    )
    value_a = c[1].selectbox("A", values, index=0, key="cmp_va")
    value_b = c[2].selectbox("B", values, index=1, key="cmp_vb")
    link |= {"va": value_a, "vb": value_b}
    if not meta:
        write_link(link)
        st.info("Pairing items inside one job needs a metadata field naming the item.")
        st.stop()
    key = c[3].selectbox("Pair items on", meta, key="cmp_key")
    link["on"] = key
    side_a, side_b = cmp.Side(job, field, value_a), cmp.Side(job, field, value_b)


def paired(a: cmp.Side = side_a, b: cmp.Side = side_b, on: str = key) -> tuple:
    """The pairs and coverage of this comparison (bound now: it may run after this rerun)."""
    return cmp.pairs(db, a, b, on), cmp.coverage(db, a, b, on)


try:
    made = fresh_or_recent(  # once per comparison and state of the index
        "compare",
        (
            (side_a.job_id, side_a.field, side_a.value),
            (side_b.job_id, side_b.field, side_b.value),
            key,
        ),
        db.data_version([side_a.job_id, side_b.job_id]),
        paired,
        what="the pairs",
    )
except cmp.CompareError as exc:
    write_link(link)
    st.warning(escape(exc))
    st.stop()
if made is None:  # being computed: the page redraws itself when they are done
    st.stop()
pairs, cover = made

st.caption(
    f"A has {cover['a']:,} items, B {cover['b']:,}; {cover['paired']:,} pair up on "
    f"{key}" + (f" (first {len(pairs):,} shown)" if len(pairs) < cover["paired"] else "")
)
if pairs.empty:
    write_link(link)
    st.info("No items pair up between A and B.")
    st.stop()

comparison = cmp.comparison_id(side_a, side_b, key)
tally = cmp.preference_tally(db, comparison)
c = st.columns(5)
c[0].metric("Mean length Δ (chars, B−A)", f"{pairs['chars_delta'].mean():+.0f}")
c[1].metric("Mean tokens Δ (B−A)", f"{pairs['tokens_delta'].mean():+.1f}")
c[2].metric("Prefer A", tally["A"])
c[3].metric("Prefer B", tally["B"])
c[4].metric("Tie", tally["tie"])
if mode == "jobs":
    pairwise_section(db, side_a.job_id, side_b.job_id, labelled)

st.dataframe(
    pairs[["key", "status_a", "status_b", "chars_delta", "tokens_delta", "answer_a", "answer_b"]],
    hide_index=True,
    width="stretch",
)

keys = list(pairs["key"])
open_linked_position("pair", "cmp_pos", len(keys))
pos = st.session_state.get("cmp_pos", 0)
pos = min(pos, len(keys) - 1)
nav = st.columns([1, 1, 3])
if nav[0].button("← Previous", disabled=pos == 0, key="cmp_prev"):
    pos -= 1
if nav[1].button("Next →", disabled=pos >= len(keys) - 1, key="cmp_next"):
    pos += 1
st.session_state["cmp_pos"] = pos
write_link({**link, "pair": pos + 1})
pair = pairs.iloc[pos].to_dict()
nav[2].markdown(f"**Pair {pos + 1} of {len(keys)}** · {escape(pair['key'])}")
left, right = st.columns(2)
for column, side, name in ((left, side_a, "a"), (right, side_b, "b")):
    column.subheader(f"{name.upper()} · {escape(side.label(labelled(side.job_id)))}")
    show_conversation(column, pair[f"messages_{name}"], pair[f"prompt_{name}"])  # its own prompt
    column.caption(escape(f"Answer · {pair[f'status_{name}']} · {pair[f'tokens_{name}']} tokens"))
    column.text(pair[f"answer_{name}"] or "(no answer)")
st.caption(
    "Word diff A → B (:red-background[removed] :green-background[added]); "
    f"{cmp.similarity(pair['answer_a'], pair['answer_b']):.0%} of words in common"
)
st.html(cmp.diff_html(pair["answer_a"], pair["answer_b"]))

reviewer = reviewer_name("Your name")
old = cmp.preference_of(db, comparison, pair["key"], reviewer) if reviewer else None
choice_cols = st.columns(3)
for col, choice in zip(choice_cols, cmp.CHOICES, strict=True):
    label = {"A": "A is better", "B": "B is better", "tie": "Tie"}[choice]
    if col.button(label, type="primary" if old == choice else "secondary", key=f"pref_{choice}"):
        try:
            cmp.save_preference(db, comparison, pair["key"], reviewer, choice, pair, side_a, side_b)
        except cmp.CompareError as exc:
            st.error(escape(exc))
        else:
            st.session_state["cmp_pos"] = min(pos + 1, len(keys) - 1)
            st.rerun()
