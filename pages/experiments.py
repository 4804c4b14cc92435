"""Experiments: an experiment's progress while it runs, then its matrix of answers (items x
variants) in views, the summary row per variant, each variant against a chosen baseline
said in words, and the matrix's export."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from core.experiments import report
from core.experiments.config import ExperimentError
from core.experiments.runs import (
    ExperimentState,
    experiments_version,
    export,
    files_version,
    grade,
    grades_stale,
    list_experiments,
    same_file,
)
from core.human.files import VERDICTS
from core.jobs.folder import JobFolder
from core.plan.pricing import cost_text, load_prices
from core.run.progress import nothing_to_watch
from core.store import compare as cmp
from core.store import export as ex
from core.store import review as rv
from ui.job_controls import job_controls
from ui.jobs import job_label, open_job
from ui.judging import judged_tally
from ui.links import compare_slices
from ui.page_cache import fresh_or_recent
from ui.sign_in import reviewer_name
from ui.store import paths, store, through_app
from ui.text import escape

REFRESH_SECONDS = 2.0
FORMATS = ("csv", "parquet", "xlsx")
VERDICTS_HELP = (
    "Pass rates are compared on the items both variants answered, with McNemar's exact test; "
    "mean scores (the share of an answer's checks that held) with a paired bootstrap. "
    "A difference is said when p < 0.05."
)
PREFER = {"A": "A is better", "B": "B is better", "tie": "Tie"}  # Compare's buttons


def kept(key: tuple, version: tuple, make: Callable[[], Any], what: str) -> Any:
    """``make()``, kept in this process for every session while the files it reads stay as
    ``version`` says (:func:`core.experiments.runs.files_version`): a rerun reads nothing
    again, and answers graded or written show on the next one (a new version is a new key,
    never a value from before). Each value takes a fraction of a second: the page waits
    for it, as it did before they were kept."""
    home = str(paths().home)
    return fresh_or_recent("experiments", (home, *key), (version, 0), make, what, patient=True)


def pick() -> tuple[ExperimentState, list[ExperimentState]]:
    """The experiment to show, the newest first, and every experiment; the page stops when
    there is none."""
    home = paths().home
    found = kept(
        ("list",), experiments_version(home), lambda: list_experiments(home), "the experiments"
    )
    if not found:
        st.info(
            "No experiment yet: run one with `python -m core experiment run FILE` "
            "(a studio experiment file or a promptfooconfig.yaml; see docs/experiments.md)."
        )
        st.stop()
    by_id = {state.experiment_id: state for state in found}
    chosen = st.selectbox(
        "Experiment",
        list(by_id),
        format_func=lambda i: f"{by_id[i].plan.name} · {i} · {by_id[i].created_at}",
        key="exp_pick",
    )
    return by_id[chosen], found


def progress(job: JobFolder, was_running: bool) -> None:
    """The job's progress and its Cancel / Resume (Monitor's and Jobs' controls): redrawn
    every few seconds while it runs; the whole page once more when it stops."""
    status = job.read_status()
    st.progress(
        status.progress,
        text=f"{status.display_state}: {status.done:,} of {status.total:,} answers",
    )
    job_controls(job, key="experiment")
    if was_running and nothing_to_watch(status):
        st.rerun()  # the matrix, graded, replaces the live view


def graded(state: ExperimentState, job: JobFolder) -> bool:
    """Grades answers that arrived since the last grading; False while the job runs."""
    status = job.read_status()
    if not nothing_to_watch(status):
        st.caption(
            escape(f"Runs as job {job_label(job.job_id)}; its answers are graded when it stops.")
        )
        return False
    again = st.button("Grade again", key="exp_grade", help="Grades every answer anew.")
    if again or grades_stale(state, status.finished_at, paths().home):
        with st.spinner("Grading…"):
            grade(state, paths().home)
    return True


def summary_section(exp: report.Experiment, version: tuple) -> None:
    prices = load_prices()
    priced = prices.model_dump_json()  # another price table is another summary
    table = kept(
        ("summary", exp.experiment_id, priced),
        version,
        lambda: report.summary_table(
            report.summary(exp, prices), lambda amount: cost_text(amount, prices.currency)
        ),
        "the summary",
    )
    st.subheader("Summary per variant")
    st.dataframe(table, hide_index=True, width="stretch", key="exp_summary")
    st.caption(
        "Pass rates are of the answers graded, with their 95 % Wilson interval; a failed "
        "request is counted apart. Cost is priced by the price table (Dashboards)."
    )


def trend_section(state: ExperimentState, found: list[ExperimentState]) -> None:
    """The pass rates of every run of the same file, when it ran more than once."""
    home = paths().home
    runs = same_file(state, found)
    if len(runs) < 2:
        return
    version = tuple(files_version(run, home) for run in runs)
    frame = kept(
        ("trend", state.experiment_id),
        version,
        lambda: report.trend(state.experiment_id, home),
        "the trend",
    )
    if frame.empty:
        return
    st.subheader("Trend across runs of this file")
    st.caption("Pass rate on every check (%) per variant, in each graded run, the oldest first.")
    st.dataframe(frame, hide_index=True, width="stretch", key="exp_trend")


def baseline_section(exp: report.Experiment, version: tuple) -> None:
    """The baseline picked, then every other variant against it, in words and numbers."""
    if len(exp.variants) < 2:
        return
    st.subheader("Against a baseline")
    base = st.selectbox(
        "Baseline",
        range(len(exp.variants)),
        format_func=exp.variants.__getitem__,
        key="exp_baseline",
        help=VERDICTS_HELP,
    )

    def against() -> tuple[list[report.Verdict], Any]:
        verdicts = report.against(exp, base)
        return verdicts, report.verdict_table(verdicts)

    verdicts, table = kept(("against", exp.experiment_id, base), version, against, "the verdicts")
    said = [v for v in verdicts if v.significant or v.measure == report.EVERY_CHECK]
    st.markdown("\n".join(f"- {escape(v.text)}" for v in said))
    with st.expander("Every delta and its p-value"):
        st.dataframe(table, hide_index=True, width="stretch")
    compare_link(exp, base)


def compare_link(exp: report.Experiment, base: int) -> None:
    """Compare opened on the baseline (A) and another variant (B), item beside item: its
    word diff and preferences (the same comparison the cells' preferences below are kept
    under)."""
    c = st.columns([2, 1], vertical_alignment="bottom")
    others = [v for v in range(len(exp.variants)) if v != base]
    other = c[0].selectbox(
        "Side by side with the baseline",
        others,
        format_func=exp.variants.__getitem__,
        key="exp_cmp_other",
    )
    _, side_a, side_b = report.comparison_of(exp, base, other)
    c[1].page_link(
        "pages/compare.py",
        label="Open in Compare",
        icon=":material/compare:",
        query_params=compare_slices(side_a, side_b, cmp.ITEM),
    )


def judges_section(exp: report.Experiment) -> None:
    """The tally of every pairwise judge of two of the variants (started on Compare), as
    Compare shows it for those two; nothing without one."""
    found = report.judged_variants(store(), exp)
    if not found:
        return
    st.subheader("Pairwise judges")
    st.caption(
        "A model said which of two variants' answers to each item is better (Compare's "
        "pairwise judge, sides shown in both orders); its verdicts mapped back to A and B."
    )
    for name_a, name_b, judged in found:
        st.markdown(f"**A: {escape(name_a)} · B: {escape(name_b)}**")
        judged_tally(judged, job_label, (name_a, name_b))


def matrix_section(exp: report.Experiment, version: tuple) -> list[int]:
    """The matrix in the chosen view: answers as plain text, never markdown. A row clicked
    opens its item below. Returns the items the view shows."""
    st.subheader("Matrix")
    view = st.selectbox("View", report.views(exp), key="exp_view")

    def shown() -> tuple[list[int], Any]:
        items = report.view_items(exp, view)
        return items, report.wide(exp, items)

    items, frame = kept(("view", exp.experiment_id, view), version, shown, "the matrix")
    st.caption(
        f"{len(items):,} of {len(exp.items):,} items · ✓ passed, ✗ failed, – not graded · "
        "click a row to open its item"
    )
    clicked = st.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        key="exp_matrix",
        on_select="rerun",
        selection_mode="single-row",
    ).selection.rows
    # Only a new click moves the item: the list below may have chosen another since.
    row = clicked[0] if clicked and clicked[0] < len(items) else None
    if row is not None and st.session_state.get("exp_matrix_row") != (view, row):
        st.session_state["exp_matrix_row"] = (view, row)
        st.session_state["exp_item"] = items[row]
    return items


def item_section(exp: report.Experiment, items: list[int]) -> None:
    """One item of the view opened: its request (the conversation, each turn as plain text
    under its role) beside every variant's answer; then a cell labelled, or one of two
    cells preferred."""
    st.subheader("An item")
    if not items:
        st.caption("No item in this view.")
        return
    item = st.selectbox("Open item", items, format_func=exp.items.__getitem__, key="exp_item")
    for turns in report.item_turns(exp, item, paths().home, store()):
        c = st.columns(2)
        c[0].markdown("**Request**")
        for role, text in turns.conversation or [("", "(the request cannot be read)")]:
            c[0].caption(escape(role))
            c[0].text(text)
        c[1].markdown("**Answers**")
        for (variant, text), labels in zip(turns.answers, turns.labels, strict=True):
            c[1].caption(escape(variant))
            c[1].text(text)
            if labels:
                c[1].caption(escape("Labelled " + ", ".join(labels)))
    reviewer = reviewer_name("Your name (as a reviewer)")
    label_section(exp, item, reviewer)
    prefer_section(exp, item, reviewer)


def label_section(exp: report.Experiment, item: int, reviewer: str) -> None:
    """A cell of the item labelled as Review labels a result (the same file and index)."""
    with st.expander("Label a cell (Review's labels)"):
        c = st.columns(2)
        variant = c[0].selectbox(
            "Variant", range(len(exp.variants)), format_func=exp.variants.__getitem__,
            key="exp_l_variant",
        )  # fmt: skip
        verdict = c[1].radio("Verdict", VERDICTS, horizontal=True, key="exp_l_verdict")
        comment = st.text_input("Comment (optional)", key="exp_l_comment")
        if st.button("Save label", key="exp_l_save"):
            job_id, cid = report.result_of(exp, item, variant)
            try:
                rv.save_label(store(), job_id, cid, reviewer, rv.Label(verdict, comment=comment))
            except rv.ReviewError as exc:
                st.error(escape(exc))
            else:  # drawn again: the label shows under its answer above
                said = f"Labelled {verdict}: {exp.variants[variant]} on {exp.items[item]}."
                st.session_state["exp_l_said"] = said
                st.rerun()
        if said := st.session_state.pop("exp_l_said", None):
            st.success(escape(said))


def prefer_section(exp: report.Experiment, item: int, reviewer: str) -> None:
    """One of two variants' answers to the item preferred, kept as Compare keeps a
    preference: Compare's tally and its DPO export count it."""
    if len(exp.variants) < 2:
        return
    with st.expander("Prefer one of two cells (Compare's preferences)"):
        c = st.columns(2)
        names = range(len(exp.variants))
        a = c[0].selectbox("A", names, format_func=exp.variants.__getitem__, key="exp_p_a")
        b = c[1].selectbox("B", names, index=1, format_func=exp.variants.__getitem__, key="exp_p_b")
        if a == b:
            st.caption("Choose two different variants.")
            return
        db = store()
        old, tally = report.preferred(db, exp, item, a, b, reviewer)
        for col, choice in zip(st.columns(3), cmp.CHOICES, strict=True):
            kind = "primary" if old == choice else "secondary"
            if col.button(PREFER[choice], type=kind, key=f"exp_p_{choice}"):
                try:
                    report.prefer(db, exp, item, a, b, reviewer, choice)
                except cmp.CompareError as exc:
                    st.error(escape(exc))
                else:  # drawn again: the choice shows as hers, the tally with it
                    said = f"Preferred {PREFER[choice]} on {exp.items[item]}."
                    st.session_state["exp_p_said"] = said
                    st.rerun()
        if said := st.session_state.pop("exp_p_said", None):
            st.success(escape(said))
        comparison = report.comparison_of(exp, a, b)[0]
        st.caption(
            f"Over every item of these two variants: A {tally['A']:,}, B {tally['B']:,}, "
            f"tie {tally['tie']:,} (Compare's tally). Kept under comparison {comparison}: "
            f"`python -m core export --what dpo --comparison {comparison}` writes its pairs "
            "for preference fine-tuning."
        )


def export_section(experiment_id: str, rows: int) -> None:
    """The matrix as a file: a row per item x variant, text inert for spreadsheets."""
    c = st.columns([1, 3])
    fmt = c[0].radio("Format", FORMATS, horizontal=True, key="exp_format")
    too_many = fmt == "xlsx" and rows > ex.EXCEL_MAX_ROWS

    def write() -> bytes:
        """Written when clicked (opening the page does no export work)."""
        with ex.export_folder(paths().home) as folder:
            target = folder / f"{experiment_id}_matrix.{fmt}"
            export(experiment_id, target, paths().home, fmt)
            return target.read_bytes()

    c[1].download_button(
        f"Export matrix {fmt.upper()}",
        data=write,
        file_name=f"{experiment_id}_matrix.{fmt}",
        key="exp_export",
        on_click="ignore",
        disabled=too_many,
    )
    if too_many:
        st.caption(f"Excel takes at most {ex.EXCEL_MAX_ROWS:,} rows: use CSV or Parquet.")


def show(state: ExperimentState, found: list[ExperimentState]) -> None:
    """The graded experiment, or why there is nothing to show."""
    home = paths().home
    version = files_version(state, home)
    try:
        exp = kept(
            ("experiment", state.experiment_id),
            version,
            lambda: report.prepared(state.experiment_id, home),
            "the matrix",
        )
    except ExperimentError as exc:
        st.error(escape("; ".join(exc.problems)))
        return
    if exp.frame.empty:
        st.info("This experiment has no items.")
        return
    summary_section(exp, version)
    trend_section(state, found)
    baseline_section(exp, version)
    judges_section(exp)
    items = matrix_section(exp, version)
    item_section(exp, items)
    export_section(state.experiment_id, len(exp.frame))


through_app()
st.title("Experiments")
state, found = pick()
job = open_job(str(state.job_id))
running = not nothing_to_watch(job.read_status())
st.fragment(run_every=REFRESH_SECONDS if running else None)(progress)(job, running)
if graded(state, job):
    show(state, found)
