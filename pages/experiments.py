"""Experiments: an experiment's progress while it runs, then its matrix of answers (items x
variants) in views, the summary row per variant, each variant against a chosen baseline
said in words, and the matrix's export."""

from __future__ import annotations

import streamlit as st

from core.experiments import report
from core.experiments.config import ExperimentError
from core.experiments.runs import ExperimentState, export, grade, grades_stale, list_experiments
from core.human.files import VERDICTS
from core.jobs.folder import JobFolder
from core.plan.pricing import cost_text, load_prices
from core.run.progress import nothing_to_watch
from core.store import export as ex
from core.store import review as rv
from ui.job_controls import job_controls
from ui.jobs import job_label, open_job
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


def pick() -> ExperimentState:
    """The experiment to show, the newest first; the page stops when there is none."""
    found = list_experiments(paths().home)
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
    return by_id[chosen]


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


def summary_section(exp: report.Experiment) -> None:
    prices = load_prices()
    rows = report.summary(exp, prices)
    st.subheader("Summary per variant")
    table = report.summary_table(rows, lambda amount: cost_text(amount, prices.currency))
    st.dataframe(table, hide_index=True, width="stretch", key="exp_summary")
    st.caption(
        "Pass rates are of the answers graded, with their 95 % Wilson interval; a failed "
        "request is counted apart. Cost is priced by the price table (Dashboards)."
    )


def trend_section(experiment_id: str) -> None:
    """The pass rates of every run of the same file, when it ran more than once."""
    runs = report.trend(experiment_id, paths().home)
    if runs.empty:
        return
    st.subheader("Trend across runs of this file")
    st.caption("Pass rate on every check (%) per variant, in each graded run, the oldest first.")
    st.dataframe(runs, hide_index=True, width="stretch", key="exp_trend")


def baseline_section(exp: report.Experiment) -> None:
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
    verdicts = report.against(exp, base)
    said = [v for v in verdicts if v.significant or v.measure == report.EVERY_CHECK]
    st.markdown("\n".join(f"- {escape(v.text)}" for v in said))
    with st.expander("Every delta and its p-value"):
        st.dataframe(report.verdict_table(verdicts), hide_index=True, width="stretch")


def matrix_section(exp: report.Experiment) -> None:
    """The matrix in the chosen view: answers as plain text, never markdown."""
    st.subheader("Matrix")
    view = st.selectbox("View", report.views(exp), key="exp_view")
    items = report.view_items(exp, view)
    st.caption(f"{len(items):,} of {len(exp.items):,} items · ✓ passed, ✗ failed, – not graded")
    st.dataframe(report.wide(exp, items), hide_index=True, width="stretch", key="exp_matrix")
    label_section(exp, items)


def label_section(exp: report.Experiment, items: list[int]) -> None:
    """A cell of the view labelled as Review labels a result (the same file and index)."""
    with st.expander("Label a cell (Review's labels)"):
        if not items:
            st.caption("No item in this view.")
            return
        c = st.columns(3)
        item = c[0].selectbox("Item", items, format_func=exp.items.__getitem__, key="exp_l_item")
        variant = c[1].selectbox(
            "Variant", range(len(exp.variants)), format_func=exp.variants.__getitem__,
            key="exp_l_variant",
        )  # fmt: skip
        verdict = c[2].radio("Verdict", VERDICTS, horizontal=True, key="exp_l_verdict")
        comment = st.text_input("Comment (optional)", key="exp_l_comment")
        reviewer = reviewer_name("Your name (as a reviewer)")
        if st.button("Save label", key="exp_l_save"):
            job_id, cid = report.result_of(exp, item, variant)
            try:
                rv.save_label(store(), job_id, cid, reviewer, rv.Label(verdict, comment=comment))
            except rv.ReviewError as exc:
                st.error(escape(exc))
            else:
                st.success(
                    escape(f"Labelled {verdict}: {exp.variants[variant]} on {exp.items[item]}.")
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


def show(state: ExperimentState) -> None:
    """The graded experiment, or why there is nothing to show."""
    try:
        exp = report.load(state.experiment_id, paths().home)
    except ExperimentError as exc:
        st.error(escape("; ".join(exc.problems)))
        return
    if exp.frame.empty:
        st.info("This experiment has no items.")
        return
    summary_section(exp)
    trend_section(state.experiment_id)
    baseline_section(exp)
    matrix_section(exp)
    export_section(state.experiment_id, len(exp.frame))


through_app()
st.title("Experiments")
state = pick()
job = open_job(str(state.job_id))
running = not nothing_to_watch(job.read_status())
st.fragment(run_every=REFRESH_SECONDS if running else None)(progress)(job, running)
if graded(state, job):
    show(state)
