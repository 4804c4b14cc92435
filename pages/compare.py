"""Compare: two jobs (or two slices of one job) side by side, a word diff, and preferences."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

import pandas as pd
import streamlit as st

from core.experiments.report import variants_of_job
from core.store import compare as cmp
from core.store import export as ex
from core.store import training as tr
from core.store.db import Store
from core.store.results import facets
from ui.jobs import job_labels, jobs_or_stop, open_job
from ui.judging import pairwise_section
from ui.links import One, fill_from_link, open_linked_position, write_link
from ui.page_cache import fresh_or_recent
from ui.sign_in import reviewer_name
from ui.store import paths, store, through_app
from ui.text import escape, show_conversation

MODES = {"jobs": "Two jobs", "slices": "Two slices of one job"}  # in the address: the key
PREFER = {"A": "A is better", "B": "B is better", "tie": "Tie"}  # a preference's button


class Comparison(NamedTuple):
    """What is compared: the mode, sides A and B, the field items pair on, and what the
    address holds of it so far."""

    mode: str
    a: cmp.Side
    b: cmp.Side
    key: str
    link: dict[str, Any]
    names: dict[str, str]  # a slice's value -> its name (an experiment's variant)

    @property
    def id(self) -> str:
        """The comparison's id, under which preferences are kept."""
        return cmp.comparison_id(self.a, self.b, self.key)


def stop_here(link: dict[str, Any], message: str, warn: bool = False) -> NoReturn:
    """Writes the address, says ``message`` and stops the page there."""
    write_link(link)
    if warn:
        st.warning(message)
    else:
        st.info(message)
    st.stop()


# -- what is compared ---------------------------------------------------------------------------


def choose(db: Store, ids: list[str], labelled: Callable[[str], str]) -> Comparison:
    """Two jobs, or two slices of one job: the sides to compare."""
    fill_from_link(  # a shared link or a bookmark; the address follows what is shown
        {
            "mode": ("cmp_mode", One(MODES)),
            "a": ("cmp_a", One(ids)),
            "b": ("cmp_b", One(ids)),
            "job": ("cmp_job", One(ids)),
        }
    )
    mode = st.radio("Compare", list(MODES), format_func=MODES.get, horizontal=True, key="cmp_mode")
    link: dict[str, Any] = {"mode": mode if mode != "jobs" else None}
    if mode == "jobs":
        return Comparison(mode, *two_jobs(db, ids, labelled, link), link, {})
    return Comparison(mode, *two_slices(db, ids, labelled, link))


def two_jobs(
    db: Store, ids: list[str], labelled: Callable[[str], str], link: dict[str, Any]
) -> tuple[cmp.Side, cmp.Side, str]:
    """Jobs A and B (adds them to ``link``), and what differs between them."""
    if len(ids) < 2:
        stop_here(link, "There is only one job. Run another, or compare two slices of this one.")
    c = st.columns(2)
    job_a = c[0].selectbox("A", ids, index=1, format_func=labelled, key="cmp_a")
    job_b = c[1].selectbox("B", ids, index=0, format_func=labelled, key="cmp_b")
    link |= {"a": job_a, "b": job_b}
    differ = cmp.job_differences(db, open_job(job_a).read_spec(), open_job(job_b).read_spec())
    st.markdown("**What differs between A and B**")
    if differ.empty:
        st.caption("The same models, prompt versions, request parameters and settings.")
    else:  # names and values come from files: a table shows them as text
        st.dataframe(differ, hide_index=True, width="stretch", key="cmp_differ")
    return cmp.Side(job_a), cmp.Side(job_b), "custom_id"


def two_slices(
    db: Store, ids: list[str], labelled: Callable[[str], str], link: dict[str, Any]
) -> tuple[cmp.Side, cmp.Side, str, dict[str, Any], dict[str, str]]:
    """A job, the field that splits it, values A and B, and the field that pairs items
    (all added to ``link``), then the names of the values (an experiment's variants by
    their labels); the page stops where one is missing."""
    job = st.selectbox("Job", ids, format_func=labelled, key="cmp_job")
    meta = [f"metadata:{k}" for k in facets(db, [job])["metadata_keys"]]
    c = st.columns(4)
    fill_from_link({"split": ("cmp_field", One([*cmp.SPLIT_FIELDS, *meta]))})
    field = c[0].selectbox("Split by", [*cmp.SPLIT_FIELDS, *meta], key="cmp_field")
    values = cmp.split_values(db, job, field)
    link |= {"job": job, "split": field}
    if len(values) < 2:
        stop_here(
            link, f"{escape(field)} has fewer than two values in this job; choose another field."
        )
    keys = [cmp.ITEM, *meta] if field == cmp.VARIANT else meta  # a variant's item: its test
    names = variants_of_job(job, paths().home) if field == cmp.VARIANT else {}
    fill_from_link(
        {"va": ("cmp_va", One(values)), "vb": ("cmp_vb", One(values)), "on": ("cmp_key", One(keys))}
    )
    value_a = c[1].selectbox("A", values, index=0, format_func=named(names), key="cmp_va")
    value_b = c[2].selectbox("B", values, index=1, format_func=named(names), key="cmp_vb")
    link |= {"va": value_a, "vb": value_b}
    if not keys:
        stop_here(link, "Pairing items inside one job needs a metadata field naming the item.")
    key = c[3].selectbox("Pair items on", keys, key="cmp_key")
    link["on"] = key
    return cmp.Side(job, field, value_a), cmp.Side(job, field, value_b), key, link, names


def named(names: dict[str, str]) -> Callable[[str], str]:
    """A slice's value as a box shows it: its name (a variant's label) beside it."""
    return lambda value: f"{names[value]} ({value})" if value in names else value


# -- the pairs ----------------------------------------------------------------------------------


def pairs_or_stop(db: Store, chosen: Comparison) -> pd.DataFrame:
    """The pairs, made once per comparison and state of the index, with a caption of how
    many pair up; the page stops while they are computed, or when none pair up."""
    a, b, key = chosen.a, chosen.b, chosen.key

    def paired() -> tuple:
        """The pairs and coverage of this comparison (it may run after this rerun)."""
        return cmp.pairs(db, a, b, key), cmp.coverage(db, a, b, key)

    try:
        made = fresh_or_recent(
            "compare",
            ((a.job_id, a.field, a.value), (b.job_id, b.field, b.value), key),
            db.data_version([a.job_id, b.job_id]),
            paired,
            what="the pairs",
        )
    except cmp.CompareError as exc:
        stop_here(chosen.link, escape(exc), warn=True)
    if made is None:  # being computed: the page redraws itself when they are done
        st.stop()
    pairs, cover = made
    st.caption(
        f"A has {cover['a']:,} items, B {cover['b']:,}; {cover['paired']:,} pair up on "
        f"{key}" + (f" (first {len(pairs):,} shown)" if len(pairs) < cover["paired"] else "")
    )
    if pairs.empty:
        stop_here(chosen.link, "No items pair up between A and B.")
    return pairs


def overview(
    db: Store, chosen: Comparison, pairs: pd.DataFrame, labelled: Callable[[str], str]
) -> None:
    """Mean differences, the preferences so far, a pairwise judge, and every pair."""
    tally = cmp.preference_tally(db, chosen.id)
    c = st.columns(5)
    c[0].metric("Mean length Δ (chars, B−A)", f"{pairs['chars_delta'].mean():+.0f}")
    c[1].metric("Mean tokens Δ (B−A)", f"{pairs['tokens_delta'].mean():+.1f}")
    c[2].metric("Prefer A", tally["A"])
    c[3].metric("Prefer B", tally["B"])
    c[4].metric("Tie", tally["tie"])
    if sum(tally.values()):
        preference_file(db, chosen.id)
    pairwise_section(db, chosen.a, chosen.b, chosen.key, labelled)
    st.dataframe(
        pairs[
            ["key", "status_a", "status_b", "chars_delta", "tokens_delta", "answer_a", "answer_b"]
        ],
        hide_index=True,
        width="stretch",
    )


def preference_file(db: Store, comparison: str) -> None:
    """The preferences as OpenAI's preference (DPO) fine-tuning file, on a click."""
    st.caption(
        f"Preferences are kept under `{comparison}` "
        f"(`python -m core export --what dpo --comparison {comparison} -o FILE.jsonl`)."
    )
    if not st.button("Prepare preference file (OpenAI DPO JSONL)", key="cmp_dpo"):
        return
    try:
        with ex.export_folder(paths().home) as folder:  # this session's own file
            name, data, outcome = tr.download_dpo(db, comparison, folder)
    except ex.ExportError as exc:
        st.error(escape(exc))
        return
    st.info(escape(f"{outcome.counted()}; left out: {outcome.reasons()}"))
    st.download_button(f"Download {name} ({outcome.counted()})", data, name)


# -- one pair -----------------------------------------------------------------------------------


def navigate(link: dict[str, Any], pairs: pd.DataFrame) -> tuple[int, dict[str, Any]]:
    """Previous and Next, and which pair of how many; returns its position and the pair."""
    count = len(pairs)
    open_linked_position("pair", "cmp_pos", count)
    pos = st.session_state.get("cmp_pos", 0)
    pos = min(pos, count - 1)
    nav = st.columns([1, 1, 3])
    if nav[0].button("← Previous", disabled=pos == 0, key="cmp_prev"):
        pos -= 1
    if nav[1].button("Next →", disabled=pos >= count - 1, key="cmp_next"):
        pos += 1
    st.session_state["cmp_pos"] = pos
    write_link({**link, "pair": pos + 1})
    pair = pairs.iloc[pos].to_dict()
    nav[2].markdown(f"**Pair {pos + 1} of {count}** · {escape(pair['key'])}")
    return pos, pair


def side_by_side(chosen: Comparison, pair: dict[str, Any], labelled: Callable[[str], str]) -> None:
    """A's and B's prompts and answers in two columns, then the word diff of the answers."""
    left, right = st.columns(2)
    for column, side, name in ((left, chosen.a, "a"), (right, chosen.b, "b")):
        shown = side.label(labelled(side.job_id), chosen.names.get(str(side.value)))
        column.subheader(f"{name.upper()} · {escape(shown)}")
        show_conversation(column, pair[f"messages_{name}"], pair[f"prompt_{name}"])  # its own
        column.caption(
            escape(f"Answer · {pair[f'status_{name}']} · {pair[f'tokens_{name}']} tokens")
        )
        column.text(pair[f"answer_{name}"] or "(no answer)")
    st.caption(
        "Word diff A → B (:red-background[removed] :green-background[added]); "
        f"{cmp.similarity(pair['answer_a'], pair['answer_b']):.0%} of words in common"
    )
    st.html(cmp.diff_html(pair["answer_a"], pair["answer_b"]))


def preference(db: Store, chosen: Comparison, pair: dict[str, Any], pos: int, count: int) -> None:
    """A reviewer's preference for this pair; saving one moves on to the next pair."""
    reviewer = reviewer_name("Your name")
    comparison = chosen.id
    old = cmp.preference_of(db, comparison, pair["key"], reviewer) if reviewer else None
    for col, choice in zip(st.columns(3), cmp.CHOICES, strict=True):
        kind = "primary" if old == choice else "secondary"
        if col.button(PREFER[choice], type=kind, key=f"pref_{choice}"):
            try:
                cmp.save_preference(
                    db, comparison, pair["key"], reviewer, choice, pair, chosen.a, chosen.b
                )
            except cmp.CompareError as exc:
                st.error(escape(exc))
            else:
                st.session_state["cmp_pos"] = min(pos + 1, count - 1)
                st.rerun()


through_app()
st.title("Compare")
jobs = jobs_or_stop(
    "No jobs yet. Run two batches (or one with two prompt versions) to compare them."
)
db = store()
labelled = job_labels()
chosen = choose(db, list(jobs["job_id"]), labelled)
pairs = pairs_or_stop(db, chosen)
overview(db, chosen, pairs, labelled)
pos, pair = navigate(chosen.link, pairs)
side_by_side(chosen, pair, labelled)
preference(db, chosen, pair, pos, len(pairs))
