"""``GET /metrics``: the studio's figures (core/run/metrics.py) in Prometheus' text format.

A registry is built for each scrape from the job folders (a collector over one
:func:`~core.run.metrics.studio_figures` read), so no process keeps counters of its own:
the figures are the jobs', and Monitor shows the same ones. A key sees its own jobs'
series, as it sees its own batches; this machine's user (loopback) sees every job's.
docs/api.md lists the names and labels.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from core.api.files import owner_of_job, visible
from core.api.keys import Caller
from core.run.metrics import Histogram, StudioFigures, studio_figures
from core.schemas import JobSpec, JobState

PREFIX = "batch_studio"
STATES = [s.value for s in JobState] + ["interrupted"]
MEDIA_TYPE = CONTENT_TYPE_LATEST


def _histogram(name: str, text: str, by_model: dict[str, Histogram]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, text, labels=["model"])
    for model, histogram in sorted(by_model.items()):
        bounds = [repr(float(b)) for b in histogram.bounds] + ["+Inf"]
        family.add_metric(
            [model], list(zip(bounds, histogram.cumulative(), strict=True)), histogram.total
        )
    return family


def families(figures: StudioFigures) -> Iterator[Metric]:
    """The Prometheus families of ``figures`` (names and labels: docs/api.md)."""
    jobs = GaugeMetricFamily(
        f"{PREFIX}_jobs", "Jobs by state and owner.", labels=["state", "owner"]
    )
    owners = {owner for _, owner in figures.jobs}
    for state in STATES:  # every state, 0 included: a panel's series never vanish
        for owner in sorted(owners):
            jobs.add_metric([state, owner], figures.jobs.get((state, owner), 0))
    yield jobs
    queued = GaugeMetricFamily(
        f"{PREFIX}_queued_lines", "Request lines of jobs waiting to run.", labels=["owner"]
    )
    for owner in sorted(owners):
        queued.add_metric([owner], figures.queued_lines.get(owner, 0))
    yield queued
    tables = (
        (GaugeMetricFamily, "running_requests", "Requests inside the engine now.",
         figures.running_requests),
        (CounterMetricFamily, "prompt_tokens", "Prompt tokens of the answers written.",
         figures.prompt_tokens),
        (CounterMetricFamily, "generation_tokens", "Output tokens of the answers written.",
         figures.output_tokens),
        (CounterMetricFamily, "requests_succeeded", "Requests with an answer.",
         figures.succeeded),
    )  # fmt: skip
    for kind, name, text, table in tables:
        family = kind(f"{PREFIX}_{name}", text, labels=["model", "owner"])
        for labels, value in sorted(table.items()):
            family.add_metric(list(labels), value)
        yield family
    reused = CounterMetricFamily(
        f"{PREFIX}_reused_answers", "Answers reused from earlier results.", labels=["owner"]
    )
    for owner, value in sorted(figures.reused.items()):
        reused.add_metric([owner], value)
    yield reused
    errors = CounterMetricFamily(
        f"{PREFIX}_request_errors",
        "Failure lines written, by error code.",
        labels=["model", "code"],
    )
    for labels, value in sorted(figures.errors.items()):
        errors.add_metric(list(labels), value)
    yield errors
    kv = GaugeMetricFamily(
        f"{PREFIX}_kv_cache_usage", "Share of the engine's KV cache in use (0-1).", labels=["model"]
    )
    for model, value in sorted(figures.kv_cache_usage.items()):
        kv.add_metric([model], value)
    yield kv
    yield _histogram(
        f"{PREFIX}_request_latency_seconds",
        "A request's time from entering the engine to its last token.",
        figures.latency,
    )
    yield _histogram(
        f"{PREFIX}_time_to_first_token_seconds",
        "A job's time from its queueing to its first output token.",
        figures.first_token,
    )
    unreadable = GaugeMetricFamily(
        f"{PREFIX}_unreadable_jobs", "Job folders whose files cannot be read (skipped)."
    )
    unreadable.add_metric([], figures.unreadable)
    yield unreadable


class _Figures(Collector):
    def __init__(self, figures: StudioFigures) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        return families(self.figures)


def exposition(jobs_dir: Path, who: Caller | None) -> bytes:
    """The text a scrape gets: every job's figures for this machine's user, a key's own."""

    def own(spec: JobSpec) -> bool:
        return visible(owner_of_job(spec), who)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Figures(studio_figures(jobs_dir, None if who is None else own)))
    return generate_latest(registry)
