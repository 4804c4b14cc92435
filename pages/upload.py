"""Upload & check: pick a batch file and see, line by line, whether it can run, what it
will cost and how long it will take."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from core.check import (
    UNREADABLE,
    BackgroundCheck,
    CheckReport,
    background,
    check_file,
    check_key,
    file_signature,
    histogram_labels,
    recall,
    remember,
    setting_rows,
)
from core.config import SAMPLE_DATA
from core.jobs.inbox import server_file
from core.jobs.queue import models_loaded
from core.jobs.submit import Submission, file_problems
from core.jobs.uploads import save_upload
from core.model_folders import model_folders
from core.model_names import studio_model_map
from core.plan.estimate import estimate
from core.plan.pricing import (
    PriceError,
    PriceTable,
    format_money,
    load_prices,
    price_rows,
    prices_path,
    save_prices,
    table_from_rows,
)
from core.schemas import EngineConfig, JobDefaults
from ui.estimate import estimate_metrics, reuse_note
from ui.handover import CheckedBatch, hand_to_run, take_back
from ui.model_picker import model_picker
from ui.store import paths, through_app
from ui.text import escape
from ui.uploads import forget_upload

DOWNLOAD_LIMIT = 200 * 2**20  # larger valid-lines files are offered by path, not download
SOURCES = ["Upload a file", "Use a sample", "A file on the server"]
INTRO = (
    "A batch file has one JSON request per line: `custom_id`, `method`, `url`, `body` "
    "(the OpenAI batch format). Nothing runs until you start it on the Run page."
)


class Chosen(NamedTuple):
    """The file to check, and its name as the user knows it."""

    path: Path
    name: str


@dataclass(frozen=True)
class CheckSettings:
    """How the file is checked: what the expander above the check chose.

    Attributes:
        model: the model folder for token counts and the context check.
        count_tokens: whether prompt tokens are counted with its tokenizer.
        defaults: the job defaults for fields a body leaves out.
        model_map: each ``body.model`` and the local model folder it runs on.
        mapped: the ``body.model`` names whose mapping boxes were shown (sorted), None
            before any check.
    """

    model: str
    count_tokens: bool
    defaults: JobDefaults
    model_map: dict[str, str]
    mapped: list[str] | None

    def options(self) -> dict[str, Any]:
        """The check's keyword arguments (its key is made of them too)."""
        return {
            "defaults": self.defaults,
            "model_folder": self.model,  # without counting, it judges only tool_choice "auto"
            "count_tokens": self.count_tokens,
            "model_map": self.model_map,
        }


class Checked(NamedTuple):
    """The check's report, and where its valid lines are written."""

    report: CheckReport
    valid_path: Path


class Estimated(NamedTuple):
    """The estimate (``Estimate.to_dict()``, None where none is made), and whether its cost
    still waits to be confirmed."""

    data: dict | None
    needs_confirmation: bool


# -- which file -----------------------------------------------------------------------------
def file_to_check() -> Chosen:
    """The file chosen, else the one checked last; the page stops while there is neither."""
    chosen = pick_file()
    last = st.session_state.get("last_checked")  # kept apart: widgets reset when a page is left
    if chosen is None and last and Path(last[0]).is_file():
        chosen = Chosen(Path(last[0]), last[1])
        st.caption(
            f"Showing the last file you checked, {escape(chosen.name)}; choose another above "
            "to replace it."
        )
    if chosen is None:
        st.info("Upload a batch JSONL file, or pick one of the samples, to check it.")
        st.stop()
    st.session_state["last_checked"] = (str(chosen.path), chosen.name)
    return chosen


def pick_file() -> Chosen | None:
    """The batch file's source, then the file from it (None while none is chosen)."""
    source = st.radio("Batch file", SOURCES, horizontal=True, key="source")
    if source == "Upload a file":
        upload_a_file()
        return None
    if source == "Use a sample":
        return a_sample()
    return a_file_on_the_server()


def upload_a_file() -> None:
    """The uploader; a file uploaded is saved and the page runs again to check it."""
    # Each upload is taken once: saved to disk, then the uploader is replaced by a new, empty
    # one (a new key), so Streamlit drops the old widget's value and every copy of the bytes
    # it held (:func:`ui.uploads.forget_upload`); the page goes on with the saved file.
    taken = st.session_state.get("uploads_taken", 0)
    uploaded = st.file_uploader(
        "OpenAI batch JSONL", type=["jsonl", "json", "txt"], key=f"batch_upload_{taken}"
    )
    st.caption(
        f"Uploads up to {st.get_option('server.maxUploadSize'):,} MB (a browser upload passes "
        "through the server's memory). Larger files: copy them onto the server and choose "
        f"*A file on the server*, drop them into the inbox folder `{paths().inbox}`, or "
        "upload them with the Batch API (`POST /v1/files`)."
    )
    if uploaded is not None:
        saved = save_upload(paths().uploads, uploaded.name, uploaded)  # copied in blocks
        forget_upload(uploaded)
        st.session_state["last_checked"] = (str(saved), uploaded.name)
        st.session_state["uploads_taken"] = taken + 1
        st.rerun()


def a_sample() -> Chosen | None:
    samples = sorted(p.name for p in SAMPLE_DATA.glob("*.jsonl"))
    name = st.selectbox("Sample batch", samples, key="sample_name")
    return Chosen(SAMPLE_DATA / name, name) if name else None


def a_file_on_the_server() -> Chosen | None:
    """A path typed (or a file of the inbox named), read where it is."""
    inbox = sorted(p.name for p in paths().inbox.glob("*.jsonl"))
    hint = f" Files in the inbox: {', '.join(inbox[:5])}." if inbox else ""
    typed = st.text_input(
        "Path of a batch file on this server",
        key="server_path",
        help=f"For very large files: the file is read where it is, never copied.{hint}",
    ).strip()
    if not typed:
        return None
    candidate = server_file(typed, paths().inbox)
    if candidate.is_file():
        return Chosen(candidate, candidate.name)
    st.error(f"No file at {escape(candidate)}. Give the full path of a JSONL file.")
    return None


# -- how to check it ---------------------------------------------------------------------------
def check_settings() -> CheckSettings:
    """The model, job defaults and model mapping the check runs with."""
    previous: CheckReport | None = st.session_state.get("check_report")
    with st.expander("Model, job defaults and model mapping"):
        model = model_picker("Model for token counts and the context check", "check_model")
        count_tokens = st.toggle(
            "Count prompt tokens with the model's tokenizer",
            value=(Path(model) / "tokenizer.json").is_file(),
            key="count_tokens",
        )
        st.markdown("**Job defaults** for fields a body leaves out")
        c1, c2, c3 = st.columns(3)
        job_defaults = JobDefaults(
            max_tokens=int(c1.number_input("Max output tokens", 1, 1_000_000, 256, key="jd_max")),
            temperature=float(c2.number_input("Temperature", 0.0, 2.0, 1.0, 0.1, key="jd_temp")),
            top_p=float(c3.number_input("Top p", 0.01, 1.0, 1.0, 0.05, key="jd_top_p")),
        )
        # The studio's names (Settings) first; a choice below overrides one for this check.
        model_map = studio_model_map()
        if previous is not None and previous.models:
            model_mapping(previous.models, model_map)
    mapped = None if previous is None else sorted(previous.models)
    return CheckSettings(model, count_tokens, job_defaults, model_map, mapped)


def model_mapping(models: dict[str, int], model_map: dict[str, str]) -> None:
    """A box per ``body.model`` the last check found: the local model it runs on, written
    into ``model_map``."""
    st.markdown("**Model mapping**: each `body.model` of the file runs on a local model")
    for name in sorted(models):
        choices = ["(the model above)", *(str(f) for f in model_folders())]
        kept_folder = model_map.get(name)
        choice = st.selectbox(
            f"{escape(name or '(none)')} runs on",
            choices,
            index=choices.index(kept_folder) if kept_folder in choices else 0,
            format_func=lambda p: p if p.startswith("(") else Path(p).name,
            key=f"map::{name}",
        )
        if choice.startswith("("):
            model_map.pop(name, None)
        else:
            model_map[name] = choice


# -- the check (in the background for a large file) ---------------------------------------------
def check(chosen: Chosen, settings: CheckSettings) -> Checked:
    """The file checked with ``settings``, once per file and settings; the page stops while a
    large file is checked in the background."""
    options = settings.options()
    key = check_key(chosen.path, **options)
    valid_path = paths().uploads / f"valid-{key}.jsonl"
    if st.session_state.get("check_key") != key:
        start_check(chosen, key, valid_path, options)
    report: CheckReport = st.session_state["check_report"]
    if report.models and settings.mapped != sorted(report.models):
        st.rerun()  # the file names other models: show their mapping boxes
    return Checked(report, valid_path)


def start_check(chosen: Chosen, key: str, valid_path: Path, options: dict[str, Any]) -> None:
    """Checks the file now (a small one, or one checked alike in this process) and keeps the
    report in the session; a large one is checked in the background, its progress shown,
    and the page stops."""
    # One valid-lines file per session: the previous check's goes (it can be large).
    stale = st.session_state.get("valid_path")
    if stale and stale != str(valid_path):
        Path(stale).unlink(missing_ok=True)
    st.session_state["valid_path"] = str(valid_path)
    task: BackgroundCheck | None = st.session_state.get("check_task")
    if task is not None and task.path != str(chosen.path):
        task.cancel()
        task = None
    earlier = recall(key)  # checked alike in this process
    if earlier is not None or chosen.path.stat().st_size <= background.SYNC_CHECK_BYTES:
        if earlier is None:
            with st.spinner("Checking every line…"):
                report = check_file(chosen.path, **options)
            remember(key, report)
        else:
            report = earlier
        st.session_state.update(
            check_key=key,
            check_report=report,
            check_task=None,
            check_file=file_signature(chosen.path),
        )
        return
    if task is None or task.key != key:
        if task is not None:
            task.cancel()
        task = BackgroundCheck(chosen.path, key, **options)
        st.session_state["check_task"] = task
    show_progress(chosen.name)
    st.stop()


@st.fragment(run_every=1.0)
def show_progress(display_name: str) -> None:
    """The background check's progress, every second; its report, once done, in the
    session and the page run again."""
    running: BackgroundCheck = st.session_state["check_task"]
    if running.done:
        if running.error:
            st.error(escape(running.error))
            return
        st.session_state.update(
            check_key=running.key,
            check_report=running.report,
            check_file=file_signature(running.path),
        )
        st.rerun()
    st.progress(
        running.fraction,
        text=f"Checking {display_name}: {running.lines:,} lines, {running.fraction:.0%}",
    )
    if st.button("Stop the check", key="stop_check"):
        running.cancel()


# -- what it found -----------------------------------------------------------------------
def findings(report: CheckReport) -> None:
    """The counts, the problems found, and whether the file can run."""
    cols = st.columns(5)
    cols[0].metric("Lines", report.lines)
    cols[1].metric("Valid", report.valid)
    cols[2].metric("Invalid", report.invalid)
    cols[3].metric("Warnings", report.warnings)
    cols[4].metric("Duplicate ids", report.duplicates)
    if report.cancelled:
        st.warning("The check was stopped: the figures cover the lines read so far.")
    if report.problems:
        problems(report)
    if report.sensitive is not None:
        sensitive_data(report)
    # Run refuses what even skipping the invalid lines leaves (a repeated custom_id): by
    # Run's own rule, said here, and running the valid lines is not offered then.
    refusals = file_problems(report, skip_invalid=True)
    if report.ok:
        st.success(f"All {report.valid} lines are valid.")
    elif refusals:
        invalid = (
            f"{report.invalid} of {report.lines} lines are invalid. " if report.invalid else ""
        )
        for problem in refusals:
            st.error(
                f"{invalid}Fix the file: Run refuses it even with the invalid lines skipped: "
                f"{escape(problem)}",
                icon=":material/block:",
            )
    elif report.valid:
        st.warning(
            f"{report.invalid} of {report.lines} lines are invalid. Fix them, or run the valid "
            "lines and give each invalid one an error result."
        )
    else:
        st.error("No line of this file can run. Fix the problems above and upload it again.")


def sensitive_data(report: CheckReport) -> None:
    """Sensitive data found in the prompts: per kind, how many and on which lines (masked)."""
    found = report.sensitive
    st.subheader("Sensitive data")
    if not found.found:
        st.caption("No e-mail address, phone, card, IBAN, IP address or credential found.")
        st.text(found.region_line())
        return
    for text in found.summary():
        st.text(text)  # masked values, shown as plain text
    st.text(found.region_line())
    st.caption(
        f"Policy: {found.policy} (Settings, Sensitive data). Values are shown masked; under "
        "the redact policy the engine sees placeholders and the file on disk stays as given."
    )


def problems(report: CheckReport) -> None:
    st.subheader("Problems")
    if report.problems_dropped:
        st.caption(
            f"The first {len(report.problems):,} findings are listed; "
            f"{report.problems_dropped:,} more are in the counts."
        )
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "line": p.line,
                    "severity": p.severity,
                    "custom_id": p.custom_id,
                    "message": p.message,
                }
                for p in report.problems
            ]
        ),
        hide_index=True,
        width="stretch",
    )


# -- summary -------------------------------------------------------------------------------
def summary(report: CheckReport, model: str) -> None:
    """What the lines ask for: urls, models, roles, sampling settings and prompt tokens
    (nothing for an empty file)."""
    if not report.lines:
        return
    st.subheader("Summary")
    st.caption(
        "Every line is counted, valid or not: lines by url and by body.model, and the "
        "messages of each line by role (a line that is no JSON object has none)."
    )
    left, middle, right = st.columns(3)
    left.markdown("**url**")
    urls = sorted(set(report.urls) | set(report.invalid_urls))
    left.table(
        pd.DataFrame(
            {
                "valid lines": [report.urls.get(u, 0) for u in urls],
                "invalid lines": [report.invalid_urls.get(u, 0) for u in urls],
            },
            index=[u or "(none)" for u in urls],
        )
        if report.invalid_urls
        else pd.Series({u or "(none)": n for u, n in report.urls.items()}, name="lines")
    )
    middle.markdown("**body.model → local model**")
    middle.table(
        pd.DataFrame(
            [
                {
                    "body.model": name or "(none)",
                    "lines": n,
                    "local model": Path(report.model_map.get(name, model)).name
                    if name != UNREADABLE
                    else "",
                }
                for name, n in report.models.items()
            ]
        ).set_index("body.model")
        if report.models
        else pd.DataFrame()
    )
    right.markdown("**roles (messages)**")
    right.table(pd.Series(dict(report.roles), name="messages"))
    run_settings(report)
    prompt_tokens(report, model)


def run_settings(report: CheckReport) -> None:
    """What the valid lines will run with, field by field."""
    settings = setting_rows(report)
    if settings:  # an embeddings-only file has no sampling settings: vectors, not text
        st.markdown("**What the valid lines will run with** (from the body, or the job default)")
        st.table(pd.DataFrame(settings).set_index("field"))
        st.caption(f"Max output tokens over the valid lines: {report.max_output_tokens:,}")
    elif report.valid:
        st.caption(
            "The valid lines are embeddings requests: each makes vectors, with no sampling "
            "settings and no output tokens."
        )


def prompt_tokens(report: CheckReport, model: str) -> None:
    """The prompt tokens counted, and their histogram."""
    if not report.tokens_counted:
        st.caption("Prompt tokens were not counted (turn it on under *Model, job defaults…*).")
        return
    counted = sum(report.token_histogram)
    mean = report.prompt_tokens / counted if counted else 0
    # The models the lines run on (an embeddings line is counted by the embedder's).
    names = [local["name"] for local in report.by_local_model.values()]
    counted_by = ", ".join(names) or Path(model).name
    st.markdown(
        f"**Prompt tokens** ({escape(counted_by)}'s tokenizer and chat template): "
        f"{report.prompt_tokens:,} in {counted:,} valid lines, mean {mean:.0f}, "
        f"max {report.prompt_tokens_max:,}"
    )
    figure = go.Figure(go.Bar(x=histogram_labels(), y=report.token_histogram))
    figure.update_layout(
        xaxis_title="prompt tokens", yaxis_title="lines", height=260, margin=dict(t=10)
    )
    st.plotly_chart(figure, key="token_histogram")


# -- estimate ------------------------------------------------------------------------------
def estimate_section(report: CheckReport, settings: CheckSettings) -> Estimated:
    """Tokens, time and cost of running the valid lines, what answers already made would
    save, and the budget's confirmation."""
    if not (report.valid and report.by_local_model):
        return Estimated(None, False)
    st.subheader("Estimate")
    prices = price_table(report)
    share = st.slider(
        "Expected answer length (share of max_tokens, until a run is measured)",
        0.05,
        1.0,
        0.5,
        key="expected_share",
    )
    result = estimate(report, prices, expected_share=share, loaded=models_loaded(paths().jobs))
    estimate_data = result.to_dict()
    estimate_metrics(estimate_data)
    cost = result.cost
    for model_estimate in result.models:
        made = (
            "vectors, timed by the input tokens/s measured on this machine"
            if model_estimate.embedding
            else f"expected output from {model_estimate.expected_basis}"
        )
        st.caption(f"{escape(model_estimate.model)}: {made}; cost: {model_estimate.cost_basis}.")
    # The job Run would make with its settings as they open (Run says it again as they change).
    planned = Submission(
        engine=EngineConfig(model=settings.model),
        defaults=settings.defaults,
        model_map=settings.model_map,
    )
    reuse_note(report, planned, prices)
    for note in result.notes:
        st.info(escape(note))
    needs_confirmation = False
    if result.over_budget:
        needs_confirmation = not st.checkbox(
            f"Run anyway: the expected cost {format_money(cost, result.currency)} is over "
            f"the budget of {format_money(result.budget, result.currency)}",
            key="budget_ok",
        )
    return Estimated(estimate_data, needs_confirmation)


def price_table(report: CheckReport) -> PriceTable:
    """The price table and budget, edited here (and saved on request); the saved one where
    an edit is refused."""
    prices = load_prices()
    with st.expander("Price table and budget"):
        st.caption(
            "Per model: a price per 1M input and output tokens, or a GPU-hour price (turned "
            "into a cost from the throughput measured on this machine)."
        )
        names = [local["name"] for local in report.by_local_model.values()]
        edited = st.data_editor(
            pd.DataFrame(price_rows(prices, names)),
            disabled=["model"],
            hide_index=True,
            key="price_editor",
        )
        budget = st.number_input(
            f"Budget for a run ({prices.currency}; 0 = none)",
            min_value=0.0,
            value=float(prices.budget or 0.0),
            step=0.001,
            format="%g",  # a budget of 0.001 must not read as 0.00
            key="budget",
        )
        try:
            prices = table_from_rows(edited.to_dict("records"), prices, budget or None)
        except PriceError as exc:
            st.error(escape(exc), icon=":material/error:")
        else:
            if st.button("Save prices and budget", key="save_prices"):
                save_prices(prices)
                st.toast(f"Price table saved to {escape(prices_path())}.")
    return prices


# -- downloads and the way on ------------------------------------------------------------------
def downloads(
    chosen: Chosen, checked: Checked, settings: CheckSettings, estimate_data: dict | None
) -> None:
    """The report, and the valid lines of a file with invalid ones, to download (nothing
    for an empty file). The valid lines are written only when asked: a copy of every
    checked file in ``uploads/`` was written unasked and never used."""
    report, valid_path = checked
    if not report.lines:
        return
    c1, c2 = st.columns(2)
    c1.download_button(
        "Download the report (JSON)",
        json.dumps({**report.to_dict(), "estimate": estimate_data}, ensure_ascii=False, indent=1),
        file_name=f"{Path(chosen.name).stem}.report.json",
        mime="application/json",
        key="download_report",
    )
    if not (report.valid and report.invalid):  # a file of valid lines is its own copy
        return
    if not valid_path.is_file():
        if c2.button(f"Write the {report.valid:,} valid lines to a file", key="write_valid"):
            with st.spinner("Writing the valid lines…"):
                check_file(chosen.path, valid_out=valid_path, **settings.options())
            st.rerun()
        return
    if valid_path.stat().st_size <= DOWNLOAD_LIMIT:
        c2.download_button(
            f"Download the {report.valid:,} valid lines (JSONL)",
            valid_path.read_bytes(),
            file_name=f"{Path(chosen.name).stem}.valid.jsonl",
            mime="application/jsonl",
            key="download_valid",
        )
    else:
        c2.caption(f"The valid lines are in `{valid_path}`.")


def the_way_on(
    chosen: Chosen, report: CheckReport, settings: CheckSettings, estimated: Estimated
) -> None:
    """A file with valid lines (and its cost confirmed) is handed to Run, with a link there;
    else nothing is."""
    if report.valid and not file_problems(report, True) and not estimated.needs_confirmation:
        hand_to_run(
            CheckedBatch(
                chosen.path,
                chosen.name,
                report=report,
                signature=st.session_state.get("check_file"),
                model=settings.model,
                model_map=report.model_map or {name: settings.model for name in report.models},
                defaults=settings.defaults,
                estimate=estimated.data,
            )
        )
        st.page_link("pages/run.py", label="Continue to Run", icon=":material/arrow_forward:")
    else:
        take_back()
        if estimated.needs_confirmation:
            st.caption("Confirm the cost above to continue to Run.")


through_app()
st.title("Upload & check")
st.caption(INTRO)
chosen = file_to_check()
settings = check_settings()
checked = check(chosen, settings)
findings(checked.report)
summary(checked.report, settings.model)
estimated = estimate_section(checked.report, settings)
downloads(chosen, checked, settings, estimated.data)
the_way_on(chosen, checked.report, settings, estimated)
