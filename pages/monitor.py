"""Monitor: a job's progress, speed, ETA and resource use, live, with its controls."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from core.jobs.delivery import errors_beside
from core.jobs.engine_files import read_state
from core.jobs.folder import JobFolder, JobUnreadable, list_jobs
from core.jobs.latest import recent_lines, standing_failures
from core.jobs.output_file import CorruptLine
from core.jobs.queue import WAITS, ahead_of
from core.jobs.windows import held_note, readable_windows, sentence
from core.run.metrics import job_model_figures, studio_figures
from core.run.monitoring import Rates, axis_range, gpu_series, rates, read_samples, thinned
from core.run.outputs import answer_text, error_text
from core.run.progress import (
    duration,
    eta,
    final_summary,
    interrupted_text,
    job_seconds,
    nothing_to_watch,
    plural,
    reused_text,
    runs_text,
    speed_figures,
    work_text,
)
from core.schemas import JobStatus
from ui.job_controls import job_controls
from ui.jobs import job_label, job_labels, job_origin, open_job
from ui.links import linked_job_notice, open_linked_job, write_link
from ui.store import paths, store, through_app
from ui.text import escape

REFRESH_SECONDS = 2.0
CHART_POINTS = 2_000  # a long job's samples are thinned to this many per chart


def studio_summary() -> None:
    """Every job's figures, as ``GET /metrics`` serves them (core/run/metrics.py)."""
    figures = studio_figures(paths().jobs)
    with st.expander("All jobs (the figures `/metrics` serves)"):
        c = st.columns(6)
        c[0].metric("Jobs running", figures.jobs_in("loading", "running", "cancelling"))
        c[1].metric("Jobs queued", figures.jobs_in("created", "queued"))
        c[2].metric("Lines queued", f"{figures.queued_lines.total():,}")
        c[3].metric("Requests in the engine", f"{figures.running_requests.total():,}")
        c[4].metric("Output tokens", f"{figures.output_tokens.total():,}")
        c[5].metric("Answers reused", f"{figures.reused.total():,}")
        codes = figures.errors_by_code()
        if codes:
            text = ", ".join(f"{code} {n:,}" for code, n in codes.most_common())
            st.caption(f"Failure lines by error code: {escape(text)}.")


def pick_job() -> str:
    """The job to monitor, as chosen, linked or last opened; with no job, an empty state
    that says what to do first (and the page stops there)."""
    jobs = list_jobs(paths().jobs)
    if not jobs:
        st.info("No jobs yet. Check a batch file and start a run; its progress shows here.")
        st.page_link("pages/upload.py", label="Upload & check", icon=":material/upload_file:")
        st.stop()
    ids = [j.job_id for j in jobs]
    open_linked_job(ids, "monitor_job")  # a shared link or a bookmark
    current = st.session_state.get("job_id")
    job_id = st.selectbox(
        "Job",
        ids,
        index=ids.index(current) if current in ids else 0,
        format_func=job_labels(),
        key="monitor_job",
    )
    st.session_state["job_id"] = job_id
    linked_job_notice("monitor_job", job_id)
    write_link({"job": job_id})  # the address opens this job's Monitor
    return job_id


def ray_section(job: JobFolder) -> None:
    """Per-node and per-replica progress of a job on a Ray cluster (its ``ray.json``)."""
    from core.run.ray_stats import device_rows, node_rows, read_ray_stats, replica_rows

    stats = read_ray_stats(job.path)
    if not stats:
        return
    st.subheader("Ray cluster")
    s = stats.get("settings") or {}
    link = f" · [Ray dashboard]({stats['dashboard_url']})" if stats.get("dashboard_url") else ""
    st.caption(
        f"{s.get('address')}: {s.get('replicas')} replica(s), {s.get('cpus_per_replica')} CPU "
        f"and {s.get('gpus_per_replica')} GPU each; updated {stats.get('updated_at')}{link}"
    )
    for event in stats.get("events", []):  # a node lost, its work moving: what happened
        text = f"{event['at']}: {event['event']}"
        st.warning(text) if " lost " in text else st.caption(text)
    cols = st.columns(2)
    cols[0].dataframe(pd.DataFrame(node_rows(stats)), hide_index=True, width="stretch")
    cols[1].dataframe(pd.DataFrame(replica_rows(stats)), hide_index=True, width="stretch")
    devices = device_rows(stats)
    if devices:  # read on each GPU node by NVML (core.run.ray_stats)
        st.dataframe(pd.DataFrame(devices), hide_index=True, width="stretch")


def _chart(lines: dict[str, tuple[object, list]], title: str, least_top: float) -> go.Figure:
    """A line chart (plotly's graph objects: a tenth of a millisecond where plotly
    express takes tens, which matters on a page that refreshes every 2 s), its y axis
    from 0 (see :func:`axis_range`)."""
    figure = go.Figure([go.Scatter(x=x, y=y, mode="lines", name=n) for n, (x, y) in lines.items()])
    figure.update_layout(title=title, showlegend=len(lines) > 1, margin={"t": 40, "b": 10})
    figure.update_yaxes(range=axis_range([v for _, y in lines.values() for v in y], least_top))
    return figure


def resource_charts(samples: list[dict]) -> None:
    """GPU memory and load per device, or without a GPU the worker's RSS and CPU."""
    shown = thinned(samples, CHART_POINTS)
    times = pd.to_datetime([s["t"] for s in shown], unit="s")
    if any(s.get("gpus") for s in shown):
        gpu_charts = (("memory_used_mib", "GPU memory (MiB)", 1.0), ("utilization", "GPU %", 100))
        for field, title, least_top in gpu_charts:
            lines = gpu_series(times, shown, field)
            st.plotly_chart(_chart(lines, title, least_top), key=f"gpu-{field}")
        return
    st.caption("No GPU on this machine: showing the worker process's memory and CPU.")
    charts = [("rss_mib", "Worker RSS (MiB)", 1.0), ("cpu_percent", "Worker CPU %", 100.0)]
    for col, (field, title, least_top) in zip(st.columns(2), charts, strict=True):
        if any(field in s for s in shown):  # samples written without it chart nothing
            values = [s.get(field) for s in shown]
            col.plotly_chart(_chart({title: (times, values)}, title, least_top), key=field)


def engine_section(numbers: dict, job_id: str) -> None:
    """The engine's own gauges while a job runs (its metrics, read at each heartbeat), and
    the other jobs that share it now."""
    state = read_state(paths().home)
    held = [f"{m.name} ({m.memory_mib:,.0f} MiB)" for m in state.models] if state else []
    caption = "Engine: " + (", ".join(held) + " loaded" if held else "no model loaded")
    beside = [job_label(i) for i in (state.job_ids if state else []) if i != job_id]
    if beside:
        caption += "; running beside this job: " + ", ".join(beside)
    st.caption(escape(caption))
    c = st.columns(4)
    c[0].metric("KV cache used", f"{numbers['kv_cache_usage']:.0%}")
    c[1].metric("Requests running", numbers["running"])
    c[2].metric("Requests waiting", numbers["waiting"], help="Admitted, waiting for room.")
    rate = numbers.get("prefix_cache_hit_rate")
    c[3].metric(
        "Prefix-cache hits",
        "–" if rate is None else f"{rate:.0%}",
        help="Share of this job's prompt tokens found in the engine's prefix cache.",
    )


def progress_bar(status: JobStatus, speed: Rates) -> None:
    """Requests done, and while it runs the share of the expected output generated."""
    text = f"{status.display_state}: {status.done:,} / {status.total:,} requests"
    work = status.progress
    if speed.work_done is not None and not status.is_final:
        work = speed.work_done
        text += " · " + work_text(speed.work_done, status)
    st.progress(work, text=text)


def waits_for(job: JobFolder, status: JobStatus) -> None:
    """For a queued job, its run window if it is outside it, and the jobs it waits for."""
    held = held_note(job.read_spec(), status)
    if held:  # the worker starts it by itself when its window opens
        st.info(escape(sentence(held)), icon=":material/schedule:")
        return
    if status.state != "queued":
        return
    if status.message.startswith(WAITS):  # the worker's own word: why it cannot join yet
        st.caption(escape(sentence(status.message.removeprefix("queued: "))))
        return
    ahead = ahead_of(job, paths().jobs)
    if ahead:
        names = ", ".join(job_label(job_id) for job_id in ahead)
        after = "that job ends" if len(ahead) == 1 else f"those {len(ahead)} jobs end"
        st.caption(escape(f"Waits for {names}: it runs once {after}."))
    else:
        st.caption("Next in the queue: it runs as soon as the worker takes it.")


def speed_metrics(status: JobStatus, speed: Rates, final: bool) -> None:
    """Requests and tokens (or texts) per second, the ETA and the time elapsed."""
    c = st.columns(4)
    for col, (label, value, help) in zip(c, speed_figures(status, speed, final), strict=False):
        col.metric(label, value, help=help)
    eta_text, eta_help = eta(status, speed)
    c[2].metric("ETA", eta_text, help=eta_help)
    c[3].metric(
        "Elapsed",
        duration(job_seconds(status)),
        help="Running time over all the job's runs"
        + (f"; this run: {duration(status.elapsed_seconds)}" if status.runs > 1 else ""),
    )


def count_metrics(status: JobStatus) -> None:
    """Succeeded, failed, the model's load and the time to the first result."""
    c = st.columns(4)
    c[0].metric("Succeeded", status.succeeded)
    c[1].metric("Failed", status.failed)
    warm = status.model_load_seconds == 0
    c[2].metric(
        "Model load",
        "warm" if warm else duration(status.model_load_seconds),
        help="The engine held the model loaded: no load." if warm else None,
    )
    c[3].metric("First result after", duration(status.first_result_seconds))


def by_model(job: JobFolder) -> None:
    """A job whose answers come from several models (a base and its LoRA adapters, or
    mapped names): each model's answers and tokens so far."""
    rows = job_model_figures(job)
    if len(rows) < 2:
        return  # one model: the figures above are its own
    table = pd.DataFrame(
        [(r.model, r.answers, r.prompt_tokens, r.output_tokens) for r in rows],
        columns=["model", "answers", "prompt tokens", "output tokens"],
    )
    st.dataframe(table, hide_index=True, width="stretch", key="monitor_by_model")


def run_notes(status: JobStatus, final: bool) -> None:
    """This run's figures, the worker's message and errors, where the results went."""
    if status.runs > 1:  # a resume or retry: which figures are the whole job's
        st.caption(runs_text(status))
    if status.reused:
        st.caption(reused_text(status))
    if status.message and not status.interrupted:  # a dead worker's last words mislead
        st.caption(escape(status.message))
    if status.error:
        st.error(escape(status.error))
    if status.delivered_to:
        st.caption(
            f"Results written to {escape(status.delivered_to)}, failures beside it in "
            f"{escape(errors_beside(status.delivered_to))}."
        )
    if status.delivery_error:
        st.warning(escape(status.delivery_error), icon=":material/cloud_off:")
    if status.in_flight and not final:
        st.caption(f"{plural(status.in_flight, 'request')} in the engine now.")


def controls(job: JobFolder, status: JobStatus) -> None:
    """Cancel, Resume and Retry; a job restarted here makes the page live again."""
    job_controls(job, key="monitor")
    after = job.read_status()
    if (status.is_final or status.interrupted) and not (after.is_final or after.interrupted):
        st.rerun()  # resumed or retried here: rerun the page so its refresh goes live again


def latest_results(job: JobFolder) -> bool:
    """The last answers written, and the failures that stand; False where a result line
    is damaged (it is named instead)."""
    try:
        recent = recent_lines(job.output) + standing_failures(job, 3)
    except CorruptLine as exc:  # the file and line, never a list that leaves it out
        st.error(escape(f"{exc}. `python -m core verify {job.job_id}` checks the rest."))
        return False
    if recent:
        st.subheader("Latest results")
        rows = [
            {"custom_id": r["custom_id"], "answer": answer_text(r), "error": error_text(r)}
            for r in recent
        ]
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    return True


def settle(job: JobFolder, status: JobStatus, named: bool) -> None:
    """A job that stopped: indexed, and the page rerun once to leave the live refresh.
    ``named``: a damaged result line was named already (it keeps the job from the index)."""
    try:
        store().ingest(job)
    except JobUnreadable as exc:
        if not named:
            st.error(escape(str(exc)))
    if st.session_state.get("summary_shown") != (job.job_id, status.finished_at):
        st.session_state["summary_shown"] = (job.job_id, status.finished_at)
        st.rerun()  # leave the live refresh: the final state needs no polling


def show(job: JobFolder) -> None:
    """The live part of the page, redrawn every few seconds while the job runs."""
    status = job.read_status()
    samples = read_samples(job.metrics)
    speed = rates(samples, status, windows=readable_windows(job.read_spec()))
    progress_bar(status, speed)
    waits_for(job, status)
    final = status.is_final or status.interrupted
    speed_metrics(status, speed, final)
    count_metrics(status)
    by_model(job)
    run_notes(status, final)
    numbers = samples[-1].get("engine") if samples else None
    if numbers and not final:
        engine_section(numbers, job.job_id)
    if status.interrupted:
        st.warning(interrupted_text(status))
    controls(job, status)
    ray_section(job)
    if samples:
        resource_charts(samples)
    readable = latest_results(job)
    if final:
        settle(job, status, named=not readable)


def verdict(job: JobFolder, job_id: str) -> None:
    """How a job that ended came out, and the way to its results."""
    status = job.read_status()
    summary = final_summary(status)
    if status.outcome == "completed":
        st.success(f"Job {escape(job_label(job_id))} completed: {summary}")
    elif status.outcome == "completed_with_errors":
        st.warning(f"Job {escape(job_label(job_id))} completed with errors: {summary}", icon="⚠️")
    elif status.state == "failed":
        st.error(f"Job {escape(job_label(job_id))} failed: {summary}", icon=":material/error:")
    st.page_link("pages/results.py", label="Open results", icon=":material/table_view:")


through_app()
st.title("Monitor")
job_id = pick_job()
job = open_job(job_id)
job_origin(job_id)
final = nothing_to_watch(job.read_status())
st.fragment(run_every=None if final else REFRESH_SECONDS)(show)(job)
if final:
    verdict(job, job_id)
studio_summary()
