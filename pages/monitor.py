"""Monitor: a job's progress, speed, ETA and resource use, live, with its controls."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from core.jobs.delivery import errors_beside
from core.jobs.engine_files import read_state
from core.jobs.folder import JobFolder, list_jobs
from core.jobs.latest import recent_lines, standing_failures
from core.jobs.recovery import resumes_by_itself
from core.run.monitoring import Rates, rates, read_samples
from core.run.outputs import answer_text, error_text
from core.schemas import JobStatus
from ui.job_controls import job_controls
from ui.jobs import job_label, job_labels, job_origin, open_job
from ui.links import linked_job_notice, open_linked_job, write_link
from ui.store import paths, store, through_app
from ui.text import escape

REFRESH_SECONDS = 2.0

through_app()
st.title("Monitor")

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
job = open_job(job_id)
job_origin(job_id)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _job_seconds(status: JobStatus) -> float | None:
    """Running time over all runs (a status from before it was kept: its run's)."""
    return status.job_seconds if status.job_seconds is not None else status.elapsed_seconds


def ray_section(job: JobFolder) -> None:
    """Per-node and per-replica progress of a job on a Ray cluster (its ``ray.json``)."""
    from core.run.ray_stats import read_ray_stats

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
    nodes = [
        {
            "node": (n.get("node_id") or "")[:12],
            "host": n.get("host"),
            "address": n.get("address"),
            "alive": n.get("alive"),
            "done": n.get("done", 0),
            "rows/s": n.get("rows_per_s"),
            "failed": n.get("failed", 0),
            "CPU": (n.get("resources") or {}).get("CPU"),
            "GPU": (n.get("resources") or {}).get("GPU"),
        }
        for n in stats.get("nodes", [])
    ]
    replicas = [
        {
            "replica": (r.get("replica_id") or "")[:12],
            "node": (r.get("node_id") or "")[:12],
            "state": r.get("state"),
            "done": r.get("done", 0),
            "shards": r.get("shards", 0),
            "busy s": r.get("busy_seconds"),
            "load s": r.get("load_seconds"),
            "RSS MiB": r.get("rss_mib"),
            "GPU MiB": r.get("gpu_memory_mib"),
            "CPU s": r.get("cpu_seconds"),
        }
        for r in stats.get("replicas", [])
    ]
    cols = st.columns(2)
    cols[0].dataframe(pd.DataFrame(nodes), hide_index=True, width="stretch")
    cols[1].dataframe(pd.DataFrame(replicas), hide_index=True, width="stretch")
    devices = [
        {
            "node": (n.get("node_id") or "")[:12],
            "host": n.get("host"),
            "GPU": gpu.get("index"),
            "memory used MiB": round(gpu.get("memory_used_mib", 0)),
            "memory total MiB": round(gpu.get("memory_total_mib", 0)),
            "utilisation %": gpu.get("utilization"),
        }
        for n in stats.get("nodes", [])
        for gpu in n.get("gpus") or ()
    ]
    if devices:  # read on each GPU node by NVML (core.run.ray_stats)
        st.dataframe(pd.DataFrame(devices), hide_index=True, width="stretch")


def _eta(status: JobStatus, speed: Rates) -> tuple[str, str]:
    """The ETA metric's value and its help."""
    if status.state == "completed":
        return "done", "The job has finished."
    if status.is_final or status.interrupted:
        return "–", "Nothing is running: a resume runs the requests without a result."
    if status.state == "cancelling":
        return "–", "Cancelling: the requests in the engine finish; nothing new starts."
    if speed.loading:
        if speed.load_left_seconds is None:
            return "loading", "The model is loading; the ETA follows once it runs."
        took = _duration(status.measured_load_seconds)
        help = (
            f"The model is loading; its last load here took {took}. The ETA follows once it runs."
        )
        return f"loading, ~{_duration(speed.load_left_seconds)}", help
    if speed.eta_seconds is None:
        if speed.eta_counts == "requests":
            return "estimating", "Known once the first results are written."
        return "estimating", "Known once the engine has generated its first tokens."
    if speed.eta_counts == "requests":
        help = "The requests still without a result, at the rate they are finishing now."
        return _duration(speed.eta_seconds), help
    if speed.eta_is_bound:
        help = (
            "At most: no answer of this model was measured yet, so every answer is taken "
            "to reach its max_tokens. Later runs use the measured lengths."
        )
        return f"≤ {_duration(speed.eta_seconds)}", help
    help = "The output still expected (measured answer lengths under each line's limit) at "
    help += "the current speed."
    return _duration(speed.eta_seconds), help


def _work_text(work_done: float, status: JobStatus) -> str:
    """The share of the output generated, against the total it is measured on."""
    expected = status.expected_output_tokens or 0
    if status.expected_is_bound:  # no answer measured: every answer taken to its limit
        return f"{work_done:.0%} of at most {expected:,} output tokens generated"
    return f"{work_done:.0%} of about {expected:,} expected output tokens generated"


CHART_POINTS = 2_000  # a long job's samples are thinned to this many per chart


def _chart(lines: dict[str, tuple[object, list]], title: str) -> go.Figure:
    """A line chart (plotly's graph objects: a tenth of a millisecond where plotly
    express takes tens, which matters on a page that refreshes every 2 s)."""
    figure = go.Figure([go.Scatter(x=x, y=y, mode="lines", name=n) for n, (x, y) in lines.items()])
    figure.update_layout(title=title, showlegend=len(lines) > 1, margin={"t": 40, "b": 10})
    return figure


def resource_charts(samples: list[dict]) -> None:
    """GPU memory and load per device, or without a GPU the worker's RSS and CPU."""
    shown = samples[:: max(len(samples) // CHART_POINTS, 1)]
    times = pd.to_datetime([s["t"] for s in shown], unit="s")
    gpus = sorted({g["index"] for s in shown for g in s.get("gpus") or []})
    if gpus:
        for field, title in (("memory_used_mib", "GPU memory (MiB)"), ("utilization", "GPU %")):
            lines = {}
            for index in gpus:
                points = [
                    (t, g[field])
                    for t, s in zip(times, shown, strict=True)
                    for g in s.get("gpus") or []
                    if g["index"] == index
                ]
                lines[f"GPU {index}"] = ([t for t, _ in points], [v for _, v in points])
            st.plotly_chart(_chart(lines, title), key=f"gpu-{field}")
        return
    st.caption("No GPU on this machine: showing the worker process's memory and CPU.")
    charts = [("rss_mib", "Worker RSS (MiB)"), ("cpu_percent", "Worker CPU %")]
    for col, (field, title) in zip(st.columns(2), charts, strict=True):
        if any(field in s for s in shown):  # samples written without it chart nothing
            values = [s.get(field) for s in shown]
            col.plotly_chart(_chart({title: (times, values)}, title), key=field)


def engine_section(numbers: dict) -> None:
    """The engine's own gauges while a job runs (its metrics, read at each heartbeat)."""
    state = read_state(paths().home)
    held = [f"{m.name} ({m.memory_mib:,.0f} MiB)" for m in state.models] if state else []
    st.caption("Engine: " + (", ".join(held) + " loaded" if held else "no model loaded"))
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


def show(job: JobFolder) -> None:
    status = job.read_status()
    samples = read_samples(job.metrics)
    speed = rates(samples, status)
    state = status.display_state
    text = f"{state}: {status.done:,} / {status.total:,} requests"
    work = status.progress
    if speed.work_done is not None and not status.is_final:
        work = speed.work_done
        text += " · " + _work_text(speed.work_done, status)
    st.progress(work, text=text)
    final = status.is_final or status.interrupted
    c = st.columns(4)
    c[0].metric(
        "Requests/s" + (" (average)" if final else ""),
        f"{speed.requests_per_s:.2f}",
        help=f"average {speed.average_requests_per_s:.2f}",
    )
    if status.embedded and not status.completion_tokens:  # a job of embeddings only
        c[1].metric(
            "Texts embedded/s" + (" (average)" if final else ""),
            f"{speed.texts_per_s:.0f}",
            help=f"average {speed.average_texts_per_s:.0f}; {status.embedded:,} texts so far",
        )
    else:
        c[1].metric(
            "Output tokens/s" + (" (average)" if final else ""),
            f"{speed.tokens_per_s:.0f}",
            help=f"average {speed.average_tokens_per_s:.0f}; since the first token, running "
            "requests' tokens counted as the engine generates them",
        )
    eta, eta_help = _eta(status, speed)
    c[2].metric("ETA", eta, help=eta_help)
    c[3].metric(
        "Elapsed",
        _duration(_job_seconds(status)),
        help="Running time over all the job's runs"
        + (f"; this run: {_duration(status.elapsed_seconds)}" if status.runs > 1 else ""),
    )
    c = st.columns(4)
    c[0].metric("Succeeded", status.succeeded)
    c[1].metric("Failed", status.failed)
    warm = status.model_load_seconds == 0
    c[2].metric(
        "Model load",
        "warm" if warm else _duration(status.model_load_seconds),
        help="The engine held the model loaded: no load." if warm else None,
    )
    c[3].metric("First result after", _duration(status.first_result_seconds))
    if status.runs > 1:  # a resume or retry: the figures above are the whole job's
        st.caption(
            f"The figures are the whole job's, over its {status.runs} runs. This run: "
            f"{status.run_done:,} results, {status.run_completion_tokens:,} output tokens "
            f"in {_duration(status.elapsed_seconds)}."
        )
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
        st.caption(f"{status.in_flight:,} requests in the engine now.")
    numbers = samples[-1].get("engine") if samples else None
    if numbers and not final:
        engine_section(numbers)
    if status.interrupted:
        what = (
            "The studio resumes the job by itself within seconds (once), or Resume does it "
            "now: it runs"
            if resumes_by_itself(status)
            else "It had been resumed by itself once already, so it is not again: Resume runs"
        )
        st.warning(
            f"The worker stopped without finishing (killed or crashed). {what} "
            f"only the {status.left:,} requests that have no result yet."
        )
    job_controls(job, key="monitor")
    after = job.read_status()
    if (status.is_final or status.interrupted) and not (after.is_final or after.interrupted):
        st.rerun()  # resumed or retried here: rerun the page so its refresh goes live again
    ray_section(job)

    if samples:
        resource_charts(samples)

    recent = recent_lines(job.output) + standing_failures(job, 3)
    if recent:
        st.subheader("Latest results")
        rows = [
            {"custom_id": r["custom_id"], "answer": answer_text(r), "error": error_text(r)}
            for r in recent
        ]
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    if status.is_final or status.interrupted:
        store().ingest(job)
        if st.session_state.get("summary_shown") != (job.job_id, status.finished_at):
            st.session_state["summary_shown"] = (job.job_id, status.finished_at)
            st.rerun()  # leave the live refresh: the final state needs no polling


now = job.read_status()  # an interrupted job that resumes by itself is watched on
final = now.is_final or (now.interrupted and not resumes_by_itself(now))
st.fragment(run_every=None if final else REFRESH_SECONDS)(show)(job)
if final:
    status = job.read_status()
    made = (  # a job of embeddings only makes vectors, not tokens
        f"{status.embedded:,} texts embedded"
        if status.embedded and not status.completion_tokens
        else f"{status.completion_tokens:,} output tokens"
    )
    summary = (
        f"{status.succeeded:,} succeeded, {status.failed:,} failed, "
        f"{made} in {_duration(_job_seconds(status))}"
        + (f" over {status.runs} runs." if status.runs > 1 else ".")
    )
    if status.outcome == "completed":
        st.success(f"Job {escape(job_label(job_id))} completed: {summary}")
    elif status.outcome == "completed_with_errors":
        st.warning(f"Job {escape(job_label(job_id))} completed with errors: {summary}", icon="⚠️")
    elif status.state == "failed":
        st.error(f"Job {escape(job_label(job_id))} failed: {summary}", icon=":material/error:")
    st.page_link("pages/results.py", label="Open results", icon=":material/table_view:")
