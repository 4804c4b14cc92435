"""Resource and progress samples of a running job, and the rates read from them.

The worker appends one sample every heartbeat to ``metrics.jsonl`` in the job folder:
progress counters, its RSS and CPU use with its children's (an engine's core and model
runner are child processes; psutil), and per-GPU memory and utilisation
read with NVML (nvidia-ml-py) where there is a GPU. The samples stay with the job, so the
monitor can chart a run after it ended.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import psutil

from core.jobs.output_file import complete_lines
from core.jobs.windows import RunWindows, open_eta, when
from core.nvml import GpuReader
from core.recent import Recent
from core.schemas import JobState, JobStatus


class ResourceSampler:
    """Reads this process's and its children's CPU/RSS and, when NVML finds GPUs, each
    GPU's memory and load (:class:`core.nvml.GpuReader`)."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._process.cpu_percent(None)  # the first reading only starts the interval
        self._children: dict[int, psutil.Process] = {}  # kept: CPU % is read between calls
        self._gpus = GpuReader()

    def _usage(self) -> tuple[int, float]:
        """RSS bytes and CPU % of this process and its children together."""
        rss, cpu = self._process.memory_info().rss, self._process.cpu_percent(None)
        alive = {}
        for child in self._process.children(recursive=True):
            known = self._children.get(child.pid, child)
            try:
                rss += known.memory_info().rss
                cpu += known.cpu_percent(None)  # 0.0 at a child's first reading
            except psutil.Error:  # ended meanwhile
                continue
            alive[child.pid] = known
        self._children = alive
        return rss, cpu

    def sample(self) -> dict[str, Any]:
        rss, cpu = self._usage()
        return {
            "rss_mib": rss / 2**20,
            "cpu_percent": cpu,
            "gpus": self._gpus.read(),
        }


def append_samples(path: Path, samples: list[dict[str, Any]]) -> None:
    """Adds samples in one write, so a reader sees all of them or none."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(sample) + "\n" for sample in samples))


SAMPLE_FILES_KEPT = 8
_samples: Recent[Path, tuple[int, list[dict[str, Any]]]] = Recent(SAMPLE_FILES_KEPT)


def read_samples(path: Path) -> list[dict[str, Any]]:
    """The samples written so far (a torn last line is skipped). The Monitor asks every
    2 s: each call reads only the lines appended since the last one (the last few jobs'
    samples stay in memory); do not change the list returned."""
    offset, samples = _samples.get(path) or (0, [])
    if not path.exists() or path.stat().st_size < offset:  # replaced: read it again
        offset, samples = 0, []
    while True:
        raws, after = complete_lines(path, offset)
        if after == offset:
            break
        samples, offset = samples + [json.loads(raw) for raw in raws], after
    _samples.put(path, (offset, samples))
    return samples


MIN_MOVING_SAMPLES = 3  # samples with progress before a speed is trusted for an ETA
FIRST_TOKEN_SPAN = 1.0  # seconds of tokens before a speed from the first token is shown
# Seconds of samples once every prompt is in before the speed counts from then: more than
# one heartbeat (2 s), whose counts, a step more or less, moved it by 30 % (297 tokens/s
# shown for a steady 230 on an AVX2 EPYC).
STEADY_SPAN = 3.0


@dataclass
class Rates:
    """Speed now (requests and texts over the last ``window`` seconds, tokens since the
    first token) and on average, the ETA, and the share of the expected output generated
    so far; a finished job's speed is its average."""

    requests_per_s: float = 0.0
    tokens_per_s: float = 0.0
    average_requests_per_s: float = 0.0
    average_tokens_per_s: float = 0.0
    texts_per_s: float = 0.0  # inputs embedded per second (embeddings lines)
    average_texts_per_s: float = 0.0
    eta_seconds: float | None = None
    eta_is_bound: bool = False  # no answer of the model measured: the ETA is at most this
    # What the ETA counts: output tokens still expected (the worker's forecast, or at the
    # speed), or requests without a result at the request rate (embeddings write no tokens).
    eta_counts: Literal["output", "requests"] = "output"
    work_done: float | None = None  # generated / expected output tokens
    loading: bool = False  # a model is loading: no ETA until it runs
    # A job with run windows: the ETA counts only their open hours, and ends then.
    eta_windows: str | None = None  # the windows, described
    eta_ends: str | None = None  # when the work ends, in the windows' zone
    load_left_seconds: float | None = None  # the load's expected time left, when measured


def _tokens(sample: dict[str, Any]) -> int:
    # Samples before the engine's counters were read hold finished requests' tokens only.
    return sample.get("output_tokens", sample.get("completion_tokens", 0))


def rates(
    samples: list[dict[str, Any]],
    status: JobStatus,
    window: float = 20.0,
    windows: RunWindows | None = None,
    now: datetime | None = None,
) -> Rates:
    """Rates from progress samples ``{"t", "done", "output_tokens"}`` and the status.

    Tokens are those the engine generated, running requests' included, so the speed moves
    while long answers are still being written. Averages count from the first sample that
    moved, so model loading does not drag them down. The ETA is the worker's forecast
    (:mod:`core.run.eta`); where it has none (a Ray cluster), the expected output still to
    come (:attr:`JobStatus.expected_output_tokens`) at the recent speed, else the average;
    none while this run has no speed of its own. ``work_done`` is this run's share of the
    output it generates (earlier runs' and reused answers' tokens apart). With the job's
    run ``windows``, the ETA is the time from ``now`` until that much work has run in
    their open hours (:func:`core.jobs.windows.open_eta`): a job paused by its window's
    close, or one whose window closes before it ends, waits through the closed hours.
    """
    result = Rates()
    moved = None
    # This run's samples only: a resumed job's earlier runs (and the gap between) would
    # blend into its speed.
    since = datetime.fromisoformat(status.started_at).timestamp() if status.started_at else 0
    running = [s for s in samples if s.get("done") is not None and s["t"] >= since - 1]
    if len(running) >= 2:
        last = running[-1]
        at_start = (running[0]["done"], _tokens(running[0]))  # a resumed run starts above 0
        moved = next(
            (i for i, s in enumerate(running) if (s["done"], _tokens(s)) != at_start), None
        )
        # The recent rate counts from the first sample that moved: the one before it spans
        # time spent loading or on prompts, which would drag the rate down long after.
        start = running[moved] if moved is not None and moved < len(running) - 1 else running[0]
        recent = [s for s in running if s["t"] >= max(last["t"] - window, start["t"])]
        first = recent[0] if len(recent) > 1 else running[-2]
        span = max(last["t"] - first["t"], 1e-9)
        result.requests_per_s = (last["done"] - first["done"]) / span
        result.tokens_per_s = (_tokens(last) - _tokens(first)) / span
        result.texts_per_s = (last.get("embedded", 0) - first.get("embedded", 0)) / span
        # Tokens/s counts from the first sample with tokens, over all the time since: a
        # window reaching back before it holds the wait for the first token (prompts, a
        # warming engine) and showed 143 tokens/s for a true 198 on an AVX2 EPYC. While
        # only the last sample has tokens, they count from the engine's first token (from
        # the step that made it): the run's start showed 110 tokens/s for a true 1,121.
        # Once every prompt is in, it counts from the first such sample: the step that
        # takes the last prompts in is slow (2 s of 46 on an AVX2 EPYC, 150 chats), and
        # counted from before it the speed read 185 tokens/s for a true 261 at a tenth done.
        # Until it spans STEADY_SPAN, the speed counts from the first token.
        with_tokens = [s for s in running[:-1] if _tokens(s) > _tokens(running[0])]
        admitted = (s for s in with_tokens if (s.get("engine") or {}).get("waiting") == 0)
        flowing = next(admitted, None) or next(iter(with_tokens), None)
        first_token = status.first_token_at
        if flowing is not None and (last["t"] - flowing["t"] >= STEADY_SPAN or first_token is None):
            since = max(last["t"] - flowing["t"], 1e-9)
            result.tokens_per_s = (_tokens(last) - _tokens(flowing)) / since
        elif first_token is not None and last["t"] - first_token >= FIRST_TOKEN_SPAN:
            earlier = status.completion_tokens - status.run_completion_tokens  # earlier runs'
            result.tokens_per_s = max(_tokens(last) - earlier, 0) / (last["t"] - first_token)
        if moved is not None:  # averages over all the work, from the sample before it
            base = running[max(moved - 1, 0)]
            elapsed = max(last["t"] - base["t"], 1e-9)
            result.average_requests_per_s = (last["done"] - base["done"]) / elapsed
            result.average_tokens_per_s = (_tokens(last) - _tokens(base)) / elapsed
            embedded = last.get("embedded", 0) - base.get("embedded", 0)
            result.average_texts_per_s = embedded / elapsed
    if status.is_final or status.interrupted:
        _final_averages(result, running, moved, status)
        result.requests_per_s = result.average_requests_per_s
        result.tokens_per_s = result.average_tokens_per_s
        result.texts_per_s = result.average_texts_per_s
        result.work_done = status.progress
        return result
    expected = status.expected_output_tokens
    if expected:
        # This run's share of what it generates: earlier runs' answers and reused ones are
        # in both totals, and were not generated by it.
        earlier = status.completion_tokens - status.run_completion_tokens
        to_generate = expected - earlier
        generated = status.generated_tokens - earlier
        result.work_done = min(generated / to_generate, 1.0) if to_generate > 0 else 1.0
        result.eta_is_bound = status.expected_is_bound
    if status.state == JobState.LOADING:
        # No figure from a speed while the model loads: it would stand still for the load
        # and then jump (0:27 for a 77 s load, then 4:45).
        result.loading = True
        if status.measured_load_seconds:
            loading = _ts(_last_entered(status, JobState.LOADING))
            since = time.time() - loading if loading is not None else 0.0
            result.load_left_seconds = max(status.measured_load_seconds - max(since, 0.0), 0.0)
        return result
    # No ETA before this run shows a speed to base it on: the model's speed on earlier runs
    # promised 0:01 for a run still taking its prompts in, and kept it for 8 s at 0 of 39.
    if not (result.tokens_per_s > 0 or result.requests_per_s > 0 or result.texts_per_s > 0):
        if not expected:
            result.eta_counts = "requests"
        return result
    if status.eta_seconds is not None:  # the worker's forecast, less the time since
        since = time.time() - (status.eta_at or time.time())
        result.eta_seconds = max(status.eta_seconds - max(since, 0.0), 0.0)
    elif expected:
        # An early speed (the engine warming up) would promise hours for minutes of work:
        # no ETA until a few samples moved.
        trusted = moved is not None and len(running) - moved >= MIN_MOVING_SAMPLES
        speed = (result.tokens_per_s or result.average_tokens_per_s) if trusted else 0.0
        if speed > 0:
            # At least one token per request still without a result: never "0 s" early.
            remaining = max(expected - status.generated_tokens, status.left)
            result.eta_seconds = remaining / speed
    else:
        result.eta_counts = "requests"
        speed = result.requests_per_s or result.average_requests_per_s
        if speed > 0:
            result.eta_seconds = status.left / speed
    if windows is not None and result.eta_seconds is not None:
        now = now or datetime.now(UTC)
        result.eta_seconds = open_eta(windows, now, result.eta_seconds)
        result.eta_windows = windows.describe()
        ends = now.timestamp() + result.eta_seconds
        result.eta_ends = when(datetime.fromtimestamp(ends, UTC), windows.zone)
    return result


def _ts(iso: str | None) -> float | None:
    return datetime.fromisoformat(iso).timestamp() if iso else None


def _last_entered(status: JobStatus, state: JobState) -> str | None:
    """When the job last entered ``state`` (its history), or None."""
    entered = [h["at"] for h in status.history if h.get("state") == state and "note" not in h]
    return entered[-1] if entered else None


def _final_averages(
    result: Rates, running: list[dict[str, Any]], moved: int | None, status: JobStatus
) -> None:
    """A run that ended: what it did (the status's counts) over the time it ran, from the
    sample before the first that moved (else from the run's start less the model load) to
    its end; from the run's first token where that came earlier (the engine's counter can
    lag: it read 1 token at every heartbeat of a 7.5 s run, so the first sample that moved
    was the last, and 20 answers that each took 7.6 s read 10.47 requests/s). Never the
    samples' last counts: the last heartbeat can come before the last results (a warm
    engine hands a small job's results back at its end, so the last sample said ``done:
    0`` and the average read 0.00 for a true 3.4 requests/s)."""
    end = _ts(status.finished_at) or status.heartbeat_at
    base = running[max(moved - 1, 0)] if moved is not None else None
    start = base["t"] if base is not None else None
    if start is not None and status.first_token_at is not None:
        start = min(start, status.first_token_at)
    if start is not None and end is not None and end > start:
        seconds = end - start
    elif status.elapsed_seconds:
        seconds = max(status.elapsed_seconds - (status.model_load_seconds or 0.0), 1e-3)
    else:  # a status without times (written before they were kept): the samples' rates
        return
    result.average_requests_per_s = status.run_done / seconds
    result.average_tokens_per_s = status.run_completion_tokens / seconds
    embedded = status.embedded - (base.get("embedded", 0) if base is not None else 0)
    result.average_texts_per_s = max(embedded, 0) / seconds


def progress_sample(done: int, output_tokens: int, resources: dict[str, Any]) -> dict:
    """One heartbeat's sample: requests done and output tokens generated so far."""
    return {"t": time.time(), "done": done, "output_tokens": output_tokens, **resources}


def axis_range(values: Sequence[float | None], least_top: float) -> list[float]:
    """A chart's y axis from 0 to a little above its largest value, and at least to
    ``least_top``: fitted to the values alone, 0.014 MiB on top of 900 drew as a climb."""
    top = max((v for v in values if v is not None), default=0.0)
    return [0.0, max(top * 1.1, least_top)]


def thinned(samples: list[dict[str, Any]], points: int) -> list[dict[str, Any]]:
    """Every n-th sample, so that a long job's charts hold about ``points`` each."""
    return samples[:: max(len(samples) // points, 1)]


def gpu_series(
    times: Sequence[Any], samples: list[dict[str, Any]], field: str
) -> dict[str, tuple[list[Any], list[Any]]]:
    """Per GPU ("GPU 0", ...), the times and values of one of its fields in ``samples``
    (``times[i]`` is sample i's); a GPU missing from a sample has no point there."""
    series = {}
    for index in sorted({g["index"] for s in samples for g in s.get("gpus") or []}):
        points = [
            (t, g[field])
            for t, s in zip(times, samples, strict=True)
            for g in s.get("gpus") or []
            if g["index"] == index
        ]
        series[f"GPU {index}"] = ([t for t, _ in points], [v for _, v in points])
    return series
