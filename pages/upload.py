"""Upload & check: pick a batch file and see, line by line, whether it can run, what it
will cost and how long it will take."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from core.check import (
    BackgroundCheck,
    CheckReport,
    background,
    check_file,
    check_key,
    file_signature,
    histogram_labels,
    recall,
    remember,
)
from core.config import SAMPLE_DATA
from core.jobs.queue import models_loaded
from core.jobs.uploads import save_upload
from core.model_folders import model_folders
from core.model_names import studio_model_map
from core.plan.estimate import estimate
from core.plan.pricing import (
    PriceError,
    format_money,
    load_prices,
    price_rows,
    prices_path,
    save_prices,
    table_from_rows,
)
from core.schemas import JobDefaults
from ui.estimate import estimate_metrics
from ui.handover import CheckedBatch, hand_to_run, take_back
from ui.model_picker import model_picker
from ui.store import paths, through_app
from ui.text import escape
from ui.uploads import forget_upload

DOWNLOAD_LIMIT = 200 * 2**20  # larger valid-lines files are offered by path, not download

through_app()
st.title("Upload & check")
st.caption(
    "A batch file has one JSON request per line: `custom_id`, `method`, `url`, `body` "
    "(the OpenAI batch format). Nothing runs until you start it on the Run page."
)

# -- which file -----------------------------------------------------------------------------
SOURCES = ["Upload a file", "Use a sample", "A file on the server"]
source = st.radio("Batch file", SOURCES, horizontal=True, key="source")
path: Path | None = None
display_name = ""
if source == "Upload a file":
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
elif source == "Use a sample":
    samples = sorted(p.name for p in SAMPLE_DATA.glob("*.jsonl"))
    name = st.selectbox("Sample batch", samples, key="sample_name")
    path = SAMPLE_DATA / name if name else None
    display_name = name or ""
else:
    inbox = sorted(p.name for p in paths().inbox.glob("*.jsonl"))
    hint = f" Files in the inbox: {', '.join(inbox[:5])}." if inbox else ""
    typed = st.text_input(
        "Path of a batch file on this server",
        key="server_path",
        help=f"For very large files: the file is read where it is, never copied.{hint}",
    ).strip()
    if typed:
        candidate = Path(typed).expanduser()
        if not candidate.is_absolute() and (paths().inbox / candidate).is_file():
            candidate = paths().inbox / candidate
        if candidate.is_file():
            path, display_name = candidate, candidate.name
        else:
            st.error(f"No file at {escape(candidate)}. Give the full path of a JSONL file.")

last = st.session_state.get("last_checked")  # kept apart: widgets reset when a page is left
if path is None and last and Path(last[0]).is_file():
    path, display_name = Path(last[0]), last[1]
    st.caption(
        f"Showing the last file you checked, {escape(display_name)}; choose another above to "
        "replace it."
    )
if path is None:
    st.info("Upload a batch JSONL file, or pick one of the samples, to check it.")
    st.stop()
st.session_state["last_checked"] = (str(path), display_name)

# -- how to check it ---------------------------------------------------------------------------
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
        st.markdown("**Model mapping**: each `body.model` of the file runs on a local model")
        for name in sorted(previous.models):
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

options = {
    "defaults": job_defaults,
    "model_folder": model,  # without counting, it judges only tool_choice "auto" lines
    "count_tokens": count_tokens,
    "model_map": model_map,
}
key = check_key(path, **options)
valid_path = paths().uploads / f"valid-{key}.jsonl"

# -- the check (in the background for a large file) ---------------------------------------------
if st.session_state.get("check_key") != key:
    # One valid-lines file per session: the previous check's goes (it can be large).
    stale = st.session_state.get("valid_path")
    if stale and stale != str(valid_path):
        Path(stale).unlink(missing_ok=True)
    st.session_state["valid_path"] = str(valid_path)
    task: BackgroundCheck | None = st.session_state.get("check_task")
    if task is not None and task.path != str(path):
        task.cancel()
        task = None
    earlier = recall(key) if valid_path.exists() else None  # checked alike in this process
    if earlier is not None or path.stat().st_size <= background.SYNC_CHECK_BYTES:
        if earlier is None:
            with st.spinner("Checking every line…"):
                report = check_file(path, valid_out=valid_path, **options)
            remember(key, report)
        else:
            report = earlier
        st.session_state.update(
            check_key=key, check_report=report, check_task=None, check_file=file_signature(path)
        )
    else:
        if task is None or task.key != key:
            if task is not None:
                task.cancel()
            task = BackgroundCheck(path, key, valid_out=valid_path, **options)
            st.session_state["check_task"] = task

        @st.fragment(run_every=1.0)
        def show_progress() -> None:
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

        show_progress()
        st.stop()

report: CheckReport = st.session_state["check_report"]
if report.models and (previous is None or sorted(previous.models) != sorted(report.models)):
    st.rerun()  # the file names other models: show their mapping boxes

# -- what it found -----------------------------------------------------------------------
cols = st.columns(5)
cols[0].metric("Lines", report.lines)
cols[1].metric("Valid", report.valid)
cols[2].metric("Invalid", report.invalid)
cols[3].metric("Warnings", report.warnings)
cols[4].metric("Duplicate ids", report.duplicates)
if report.cancelled:
    st.warning("The check was stopped: the figures cover the lines read so far.")

if report.problems:
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

if report.ok:
    st.success(f"All {report.valid} lines are valid.")
elif report.valid:
    st.warning(
        f"{report.invalid} of {report.lines} lines are invalid. Fix them, or run the valid "
        "lines and give each invalid one an error result."
    )
else:
    st.error("No line of this file can run. Fix the problems above and upload it again.")

# -- summary -------------------------------------------------------------------------------
if report.lines:
    st.subheader("Summary")
    left, middle, right = st.columns(3)
    left.markdown("**url**")
    # The lines that run, by url; invalid lines apart (they run nowhere).
    urls = sorted(set(report.urls) | set(report.invalid_urls))
    left.table(
        pd.DataFrame(
            {
                "valid lines": [report.urls.get(u, 0) for u in urls],
                "invalid lines": [report.invalid_urls.get(u, 0) for u in urls],
            },
            index=urls,
        )
        if report.invalid_urls
        else pd.Series(dict(report.urls), name="lines")
    )
    middle.markdown("**body.model → local model**")
    middle.table(
        pd.DataFrame(
            [
                {
                    "body.model": name or "(none)",
                    "lines": n,
                    "local model": Path(report.model_map.get(name, model)).name,
                }
                for name, n in report.models.items()
            ]
        ).set_index("body.model")
        if report.models
        else pd.DataFrame()
    )
    right.markdown("**roles (messages)**")
    right.table(pd.Series(dict(report.roles), name="messages"))

    settings = [
        {"field": name, "value (source)": value, "lines": n}
        for name, counter in report.effective.items()
        for value, n in sorted(counter.items(), key=lambda item: -item[1])
    ]
    if settings:  # an embeddings-only file has no sampling settings: vectors, not text
        st.markdown("**What the valid lines will run with** (from the body, or the job default)")
        st.table(pd.DataFrame(settings).set_index("field"))
        st.caption(f"Max output tokens over the valid lines: {report.max_output_tokens:,}")
    elif report.valid:
        st.caption(
            "The valid lines are embeddings requests: each makes vectors, with no sampling "
            "settings and no output tokens."
        )

    if report.tokens_counted:
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
    else:
        st.caption("Prompt tokens were not counted (turn it on under *Model, job defaults…*).")

# -- estimate ------------------------------------------------------------------------------
needs_confirmation = False
estimate_data: dict | None = None
if report.valid and report.by_local_model:
    st.subheader("Estimate")
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
    for note in result.notes:
        st.info(escape(note))
    if result.over_budget:
        needs_confirmation = not st.checkbox(
            f"Run anyway: the expected cost {format_money(cost, result.currency)} is over "
            f"the budget of {format_money(result.budget, result.currency)}",
            key="budget_ok",
        )

# -- downloads and the way on ------------------------------------------------------------------
if report.lines:
    c1, c2 = st.columns(2)
    c1.download_button(
        "Download the report (JSON)",
        json.dumps({**report.to_dict(), "estimate": estimate_data}, ensure_ascii=False, indent=1),
        file_name=f"{Path(display_name).stem}.report.json",
        mime="application/json",
        key="download_report",
    )
    if report.valid and valid_path.is_file():
        if valid_path.stat().st_size <= DOWNLOAD_LIMIT:
            c2.download_button(
                f"Download the {report.valid:,} valid lines (JSONL)",
                valid_path.read_bytes(),
                file_name=f"{Path(display_name).stem}.valid.jsonl",
                mime="application/jsonl",
                key="download_valid",
            )
        else:
            c2.caption(f"The valid lines are in `{valid_path}`.")

if report.valid and not needs_confirmation:
    hand_to_run(
        CheckedBatch(
            path,
            display_name,
            report=report,
            signature=st.session_state.get("check_file"),
            model=model,
            model_map=report.model_map or {name: model for name in report.models},
            defaults=job_defaults,
            estimate=estimate_data,
        )
    )
    st.page_link("pages/run.py", label="Continue to Run", icon=":material/arrow_forward:")
else:
    take_back()
    if needs_confirmation:
        st.caption("Confirm the cost above to continue to Run.")
