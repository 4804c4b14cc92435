"""Review's labelling panel (not a page of its own): one item at a time, labelled by key.

The panel is a fragment: a key (a verdict, a score, Previous/Next) reruns the panel only,
not the page with its sample and job queries, and its callbacks save the label in its file
and move on before the panel draws, so the next item shows at once, even while a worker runs
(the page's rerun waits on the ingest of its results; the index's write and commit, slow
while results stream in, run on the store's indexing thread, one pass for the saves of a
quarter second of every session). The reviewer's labels of the sample are read once per
page run and kept in the session; a save updates them there. The label form is one form for
every item, its fields filled for the item shown: the browser updates its widgets in place
rather than building a new form for each item.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.human import label_schemas as lsc
from core.human import label_sets as ls
from core.human import questions as qs
from core.store import review as rv
from core.store.db import Store
from ui.links import write_link
from ui.text import escape, show_conversation

TABS = ("Label", "Progress & agreement", "Export")
LABELS = "review_labels"  # (sample_id, reviewer) -> {(job_id, custom_id): Label}
QUEUE = "review_queue"  # (sample_id, reviewer) -> their queue's items, in queue order
INDEXING = "review_indexing"  # (job_id, custom_id) -> the ticket of its save's index pass
SCORES = (1, 2, 3, 4, 5)
FIELDS = ("review_tags", "review_comment", "review_corrected")  # the form's text fields
FILLED = "review_filled"  # the item (sample, reviewer, job, custom_id) FIELDS were filled for
ANSWERED = ("single", "multiple", "rating")  # the questions whose answers are a label's answers


def own_labels_editor(db: Store, reviewer: str) -> tuple[str, ...]:
    """The reviewer's own labels beyond pass/fail/unsure: shown, changed, saved to the data
    folder; returns them."""
    own = ls.own_labels(db.human_dir, reviewer)
    title = "Your own labels" + (f": {', '.join(own)}" if own else " (beyond pass, fail, unsure)")
    with st.expander(escape(title)), st.form("own_labels"):
        text = st.text_input(
            "Labels, comma-separated (each becomes a button with a key, beside pass/fail/unsure)",
            ", ".join(own),
            max_chars=ls.MAX_LABELS * 42,
            placeholder="off-topic, made up, too long",
        )
        if st.form_submit_button("Save my labels"):
            try:
                own = ls.save_own_labels(db.human_dir, reviewer, text)
            except ls.LabelSetError as exc:
                st.error(escape(exc))
            else:
                st.rerun()  # the panel's buttons follow
    return own


def schema_editor(
    db: Store, sample_id: str, reviewer: str, refused: str | None = None
) -> qs.LabelSchema:
    """The sample's label schema and guidelines: shown, changed, saved to the data folder
    by the sample's owner or an admin; read-only, with ``refused`` (why), for anyone else
    (``core.human.owners.change_refusal``); returns it."""
    schema = lsc.schema_of(db.human_dir, sample_id)
    title = (
        "Label schema and guidelines (now: pass, fail, unsure and a score)"
        if schema.empty
        else f"Label schema: {len(schema.questions)} questions"
        + (" and guidelines" if schema.guidelines else "")
    )
    with st.expander(escape(title)), st.form("label_schema"):
        if refused:
            st.caption(escape(refused))
        questions = st.text_area(
            "Questions, one a line (type: title | options); none for pass, fail, unsure",
            qs.questions_text(schema.questions),
            height=140,
            placeholder=qs.EXAMPLE,
            help="single or multiple: a choice among the options, comma-separated; rating: a "
            "scale low..high, then optionally the words at its ends; corrected: an answer that "
            "replaces the model's; comment: a note.",
            disabled=bool(refused),
        )
        guidelines = st.text_area(
            "Guidelines (plain text, shown beside every item)",
            schema.guidelines,
            max_chars=qs.GUIDELINES_CHARS,
            disabled=bool(refused),
        )
        if st.form_submit_button("Save the schema", disabled=bool(refused)) and not refused:
            try:
                schema = lsc.set_schema(db.human_dir, sample_id, questions, guidelines, reviewer)
            except qs.SchemaError as exc:
                st.error(escape(exc))
            else:
                st.rerun()  # the panel asks the new questions
    return schema


def load_labels(db: Store, sample_id: str, reviewer: str) -> None:
    """Reads the reviewer's labels of the sample afresh (each page run: another process's
    labels show too); the panel's own saves update them in between."""
    st.session_state[LABELS] = {(sample_id, reviewer): rv.sample_labels(db, sample_id, reviewer)}


def hold_queue(sample_id: str, reviewer: str, items: pd.DataFrame) -> None:
    """Keeps the reviewer's queue as the page read it (``rv.queue_items``, each page run) in
    the session: the panel shows it, and Skip reorders it there (the panel's rerun only)."""
    st.session_state[QUEUE] = {(sample_id, reviewer): items}


@st.fragment
def label_panel(
    db: Store,
    sample_id: str,
    items: pd.DataFrame,
    reviewer: str,
    own: tuple[str, ...],
    queued: bool = False,
    schema: qs.LabelSchema = lsc.DEFAULT,
) -> None:
    """Progress, the item at ``review_pos`` and its label form; keys: P/F/U and the own
    labels' save and move on, 1-5 set the score, Left/Right/N move. ``queued``: ``items`` are
    the reviewer's queue (:func:`hold_queue`; the session's, as Skip left it, is shown), and
    S puts the item off to its end, the next one in its place. A ``schema`` with questions
    asks them in place of the score, tags, comment and correction (the digits then answer its
    keyed rating); its guidelines show beside every item."""
    labels = st.session_state[LABELS][(sample_id, reviewer)]
    if queued:
        items = st.session_state[QUEUE][(sample_id, reviewer)]
    n = len(items)
    pos = min(st.session_state.get("review_pos", 0), n - 1)
    form = f"{sample_id}_{pos}"
    keys = list(zip(items["job_id"], items["custom_id"], strict=True))
    done = sum(k in labels for k in keys)
    st.progress(done / n if n else 0.0, text=f"{done} of {n} labelled")
    nav = st.columns([1, 1, 1, 1, 3] if queued else [1, 1, 1, 3])
    if queued:  # the item goes last, the next takes its place: the panel reruns, not the page
        nav[3].button(
            "Skip", key="skip", shortcut="S", disabled=n < 2, on_click=_skip,
            args=(db, sample_id, reviewer, pos, form),
        )  # fmt: skip
    nav[0].button(
        "Previous", disabled=pos == 0, key="prev", shortcut="Left", on_click=_go, args=(pos - 1,)
    )
    nav[1].button(
        "Next", disabled=pos >= n - 1, key="next", shortcut="Right", on_click=_go, args=(pos + 1,)
    )
    open_items = [i for i, k in enumerate(keys) if k not in labels]
    after = next((i for i in open_items if i > pos), open_items[0] if open_items else pos)
    nav[2].button("Next unlabelled", key="next_open", shortcut="N", on_click=_go, args=(after,))
    item = items.iloc[pos]
    job_id, custom_id = keys[pos]
    nav[-1].markdown(f"**Item {pos + 1} of {n}** · {escape(custom_id)}")
    link_review(sample_id, n)
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

    if schema.guidelines:
        with st.expander("Guidelines", expanded=True):
            st.text(schema.guidelines)  # the owner's text, never markdown

    old = labels.get((job_id, custom_id))
    score = st.session_state.get(f"score_{form}", old.score if old else None)
    _fill_fields((sample_id, reviewer, job_id, custom_id), old, schema)
    # One form for every item: its widgets keep their ids, so the browser updates them in
    # place for the next item instead of building a new form (long redraws after each key).
    with st.form("label_item"):
        if schema.questions:
            _questions(schema)
        else:
            st.caption("Score (optional): keys 1–5; the same key again clears it.")
            for column, value in zip(st.columns(len(SCORES)), SCORES, strict=True):
                column.form_submit_button(
                    str(value),
                    type="primary" if score == value else "secondary",
                    shortcut=str(value),
                    width="stretch",
                    on_click=_set_score,
                    args=(form, value, score),
                )
            st.text_input("Tags (comma-separated)", key=FIELDS[0])
            st.text_area("Comment", height=68, key=FIELDS[1])
            st.text_area("Corrected answer (optional)", height=68, key=FIELDS[2])
        shortcuts = {v: v[0].upper() for v in rv.VERDICTS} | ls.shortcut_keys(own)
        st.caption(
            "A label saves the item and moves on: keys "
            + ", ".join(escape(f"{k} {v}") for v, k in shortcuts.items() if k)
            + "."
        )
        for column, verdict in zip(st.columns(len(shortcuts)), shortcuts, strict=True):
            key = shortcuts[verdict]
            column.form_submit_button(
                escape(verdict.capitalize() if verdict in rv.VERDICTS else verdict),
                type="primary" if old is not None and old.verdict == verdict else "secondary",
                shortcut=key,
                width="stretch",
                on_click=_save,
                args=(
                    db,
                    sample_id,
                    (job_id, custom_id),
                    reviewer,
                    verdict,
                    form,
                    score,
                    pos,
                    n,
                    schema,
                ),
            )
    error = st.session_state.pop("review_error", None)
    if error:
        st.error(escape(error))
    if old:
        st.caption(f"You labelled this item: {escape(old.verdict)}.")
    ticket = st.session_state.get(INDEXING, {}).pop((job_id, custom_id), None)
    if ticket:  # this session saved a label here: its history shows it (in the index soon)
        rv.wait_indexed(db, ticket)
    history = rv.label_history(db, job_id, custom_id)
    if len(history) > 1:
        with st.expander(f"Label history of this item ({len(history)} saves)"):
            st.dataframe(history, hide_index=True)


def link_review(sample_id: str, n: int) -> None:
    """Writes the sample, the item (from 1) and the tab shown into the page's address."""
    pos = min(st.session_state.get("review_pos", 0), n - 1) + 1
    tab = st.session_state.get("review_tab")
    write_link({"sample": sample_id, "item": pos, "tab": tab if tab != TABS[0] else None})


def _questions(schema: qs.LabelSchema) -> None:
    """The schema's questions, in order, each with its widget (titles and options are the
    owner's text: escaped where a widget reads markdown). The keyed rating is a row of
    buttons, as the default label's score: a digit key presses one (highlighted; the same
    key again clears it), and the key is written beside the question."""
    keyed = schema.keyed_rating
    for q in schema.questions:
        title = escape(q.title)
        if q is keyed:
            _keyed_rating(q)
        elif q.type == "single":
            st.radio(
                title, q.options, index=None, format_func=escape, horizontal=True,
                key=_answer_key(q),
            )  # fmt: skip
        elif q.type == "multiple":
            st.multiselect(title, q.options, key=_answer_key(q))  # options show as text
        elif q.type == "rating":
            st.radio(
                title, q.scale, index=None, horizontal=True, key=_answer_key(q),
                format_func=lambda v, q=q: escape(_scale_value(q, v)),
            )  # fmt: skip
        else:  # the label's own corrected answer and comment, under the owner's title
            st.text_area(title, height=68, key=FIELDS[2] if q.type == "corrected" else FIELDS[1])


def _keyed_rating(q: qs.Question) -> None:
    """A rating as buttons with digit keys (``core.human.questions.rating_keys``); its value
    is kept under the question's answer key, as a radio's would be."""
    st.markdown(escape(q.title))
    st.caption(escape(qs.rating_key_hint(q)))
    keys = qs.rating_keys(q)
    value = st.session_state.get(_answer_key(q))
    for column, v in zip(st.columns(len(q.scale)), q.scale, strict=True):
        column.form_submit_button(
            escape(_scale_value(q, v)),
            type="primary" if value == v else "secondary",
            shortcut=keys.get(v),
            width="stretch",
            key=f"review_rating_{v}",
            on_click=_set_rating,
            args=(_answer_key(q), v),
        )


def _set_rating(key: str, value: int) -> None:
    st.session_state[key] = None if st.session_state.get(key) == value else value


def _scale_value(q: qs.Question, value: int) -> str:
    words = {q.low: q.low_label, q.high: q.high_label}.get(value)
    return f"{value} ({words})" if words else str(value)


def _answer_key(q: qs.Question) -> str:
    return f"review_answer_{q.title}"


def _fill_fields(
    item: tuple[str, str, str, str], old: rv.Label | None, schema: qs.LabelSchema
) -> None:
    """Fills the form's fields with the item's saved label (empty without one) when the
    panel shows another item, or the sample's schema changed; on the same item they keep
    what the reviewer typed."""
    marker = (*item, hash(schema.model_dump_json()))
    shown = [_answer_key(q) for q in schema.questions if q.type in ANSWERED] or FIELDS
    if st.session_state.get(FILLED) == marker and all(f in st.session_state for f in shown):
        return
    st.session_state[FILLED] = marker
    values = (", ".join(old.tags), old.comment, old.corrected_answer) if old else ("", "", "")
    for field, value in zip(FIELDS, values, strict=True):
        st.session_state[field] = value
    answers = old.answers if old else {}
    for q in schema.questions:
        if q.type == "multiple":
            given = answers.get(q.title)
            picked = given if isinstance(given, list) else []
            st.session_state[_answer_key(q)] = [o for o in picked if o in q.options]
        elif q.type in ANSWERED:
            value = answers.get(q.title)
            st.session_state[_answer_key(q)] = value if value in (q.options or q.scale) else None


def _go(pos: int) -> None:
    st.session_state["review_pos"] = max(pos, 0)


def _skip(db: Store, sample_id: str, reviewer: str, pos: int, form: str) -> None:
    """Puts the item at ``pos`` off to the end of the session's queue (and the skips' file),
    before the panel reruns; the item now at ``pos`` starts without the skipped one's score."""
    queue = st.session_state[QUEUE]
    queue[(sample_id, reviewer)] = rv.skip_item(
        db, sample_id, reviewer, queue[(sample_id, reviewer)], pos
    )
    st.session_state.pop(f"score_{form}", None)


def _set_score(form: str, value: int, current: int | None) -> None:
    st.session_state[f"score_{form}"] = None if current == value else value


def _save(
    db: Store,
    sample_id: str,
    item: tuple[str, str],
    reviewer: str,
    verdict: str,
    form: str,
    score: int | None,
    pos: int,
    n: int,
    schema: qs.LabelSchema,
) -> None:
    """Saves the label in its file and moves to the next item, before the panel reruns (the
    panel indexes it after drawing that item); a refused label stays on the item with the
    reason."""
    state = st.session_state
    answers = {q.title: state.get(_answer_key(q)) for q in schema.questions if q.type in ANSWERED}
    label = rv.Label(
        verdict,
        score,
        rv.parse_tags(state.get(FIELDS[0], "")),  # under a schema: as filled, kept
        state.get(FIELDS[1], ""),
        state.get(FIELDS[2], ""),
        {k: v for k, v in answers.items() if v not in (None, [])},
    )
    try:
        rv.record_label(db, *item, reviewer, label, sample_id, durable=False)
    except rv.ReviewError as exc:
        state["review_error"] = str(exc)
        return
    state[LABELS][(sample_id, reviewer)][item] = label
    # indexed on the store's thread with other sessions' saves; the next item shows first
    state.setdefault(INDEXING, {})[item] = rv.index_in_background(db)
    state.pop(f"score_{form}", None)
    state["review_pos"] = min(pos + 1, n - 1)
