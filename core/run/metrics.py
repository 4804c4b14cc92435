"""The studio's figures over every job, read from the job folders: what ``GET /metrics``
exposes (core/api/metrics.py) and what Monitor's studio summary shows, from this one
function, :func:`studio_figures`.

Nothing holds state between reads but a cache: each job's ``status.json`` is parsed again
only when it changed, its ``job.json`` once, and its result files are read only past where
the last read stopped (a finished job's once per process), so a scrape of a studio with
many finished jobs costs a few ``stat`` calls per job.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import msgspec

from core.jobs.folder import JobFolder, JobUnreadable, list_jobs
from core.jobs.output_file import CorruptLine, complete_lines
from core.schemas import WAITING_STATES, JobSpec, JobStatus

# Seconds. A request's latency: entering the engine to its last token (vLLM's e2e buckets).
LATENCY_BUCKETS = (0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                   40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0)  # fmt: skip
# A job's wait for its first token, from its queueing: seconds to hours behind a long job.
FIRST_TOKEN_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
                       1800.0, 3600.0, 7200.0, 21600.0, 86400.0)  # fmt: skip
TAIL_BYTES = 16_384  # the end of metrics.jsonl read for the last sample (one is ~300 bytes)
INTERRUPTED = "interrupted"  # a job whose worker died: shown so, never stored (JobStatus)


@dataclass
class Histogram:
    """Observations counted per bucket (``counts[i]``: at most ``bounds[i]``, the last
    beyond every bound), with their sum."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        index = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[index] += 1
        self.total += value

    def add(self, other: Histogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[int]:
        """Prometheus' buckets: observations at most each bound, then all of them."""
        out, running = [], 0
        for n in self.counts:
            running += n
            out.append(running)
        return out


@dataclass
class StudioFigures:
    """Every figure of :func:`studio_figures`, keyed by its labels (``owner``: the job's
    owner as the app shows it, the API key's name or the user; ``model``: the job's model
    folder's name)."""

    jobs: Counter[tuple[str, str]] = field(default_factory=Counter)  # (state, owner)
    queued_lines: Counter[str] = field(default_factory=Counter)  # owner
    running_requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (model, owner)
    prompt_tokens: Counter[tuple[str, str]] = field(default_factory=Counter)  # (model, owner)
    output_tokens: Counter[tuple[str, str]] = field(default_factory=Counter)  # (model, owner)
    succeeded: Counter[tuple[str, str]] = field(default_factory=Counter)  # (model, owner)
    reused: Counter[str] = field(default_factory=Counter)  # owner: answers reused
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (model, error code)
    kv_cache_usage: dict[str, float] = field(default_factory=dict)  # model: share in use
    latency: dict[str, Histogram] = field(default_factory=dict)  # model
    first_token: dict[str, Histogram] = field(default_factory=dict)  # model
    unreadable: int = 0  # job folders skipped: their files cannot be read

    def jobs_in(self, *states: str) -> int:
        """Jobs in any of ``states``, every owner's."""
        return sum(n for (s, _), n in self.jobs.items() if s in states)

    def errors_by_code(self) -> Counter[str]:
        """Failure lines by error code, every model's."""
        codes: Counter[str] = Counter()
        for (_, code), n in self.errors.items():
            codes[code] += n
        return codes


class _Line(msgspec.Struct):
    latency_ms: float | None = None
    reused_from: msgspec.Raw | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    input_tokens: int | None = None  # a Responses body's names
    output_tokens: int | None = None


class _Body(msgspec.Struct):
    model: str | None = None
    usage: _Usage | None = None


class _Response(msgspec.Struct):
    body: _Body | None = None


class _Answer(msgspec.Struct):
    """What a success line says of the model that made it (an adapter by its own name)."""

    response: _Response | None = None


class _Error(msgspec.Struct):
    code: str | None = None


class _ErrorLine(msgspec.Struct):
    error: _Error | None = None


_decode_line = msgspec.json.Decoder(_Line).decode
_decode_answer = msgspec.json.Decoder(_Answer).decode
_decode_error = msgspec.json.Decoder(_ErrorLine).decode


@dataclass
class _FileRead:
    """How far a result file was read, and what its lines held so far."""

    inode: int = -1
    offset: int = 0
    latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    errors: Counter[str] = field(default_factory=Counter)
    # By the model each answer names: answers, prompt and output tokens.
    answers: Counter[str] = field(default_factory=Counter)
    prompt_tokens: Counter[str] = field(default_factory=Counter)
    output_tokens: Counter[str] = field(default_factory=Counter)


@dataclass
class _Job:
    spec: JobSpec
    spec_stamp: tuple[int, int]
    status: JobStatus | None = None
    status_stamp: tuple[int, int] = (-1, -1)
    output: _FileRead = field(default_factory=_FileRead)
    errors: _FileRead = field(default_factory=_FileRead)


_jobs: dict[Path, _Job] = {}
_lock = threading.Lock()  # one reader at a time updates the cache (scrapes and pages)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def _read_on(path: Path, kept: _FileRead, line: Callable[[bytes, _FileRead], None]) -> _FileRead:
    """``kept`` with the lines appended to ``path`` since it was read (a replaced file's
    from its start)."""
    try:
        info = os.stat(path)
    except OSError:
        return kept
    if info.st_ino != kept.inode or info.st_size < kept.offset:  # new or replaced
        kept = _FileRead(inode=info.st_ino)
    while kept.offset < info.st_size:
        try:
            raws, after = complete_lines(path, kept.offset)
        except CorruptLine:  # named by the job's pages; the lines before it still count
            break
        if after == kept.offset:
            break
        for raw in raws:
            line(raw, kept)
        kept.offset = after
    return kept


def _success(raw: bytes, kept: _FileRead) -> None:
    try:
        line = _decode_line(raw)
    except msgspec.DecodeError:  # not a result line: counted by nobody
        return
    if line.latency_ms is not None and line.reused_from is None:  # a reused answer's was
        kept.latency.observe(line.latency_ms / 1000)  # timed in the job that made it
    try:
        body = _decode_answer(raw).response
    except msgspec.DecodeError:  # a body of other shapes: its latency still counts
        return
    body = body.body if body else None
    if body is None or body.model is None:
        return
    kept.answers[body.model] += 1
    if body.usage is not None:
        usage = body.usage
        kept.prompt_tokens[body.model] += usage.prompt_tokens or usage.input_tokens or 0
        kept.output_tokens[body.model] += usage.completion_tokens or usage.output_tokens or 0


def _failure(raw: bytes, kept: _FileRead) -> None:
    try:
        line = _decode_error(raw)
    except msgspec.DecodeError:
        return
    kept.errors[(line.error.code if line.error else None) or "unknown"] += 1


def _job(folder: JobFolder) -> _Job | None:
    """The job's entry, brought up to date with its files; None when they cannot be read."""
    entry = _jobs.get(folder.path)
    spec_stamp = _stamp(folder.spec_file)
    if spec_stamp is None:
        return None
    if entry is None or entry.spec_stamp != spec_stamp:
        try:
            entry = _Job(folder.read_spec(), spec_stamp)
        except JobUnreadable:
            return None
        _jobs[folder.path] = entry
    status_stamp = _stamp(folder.status_file) or (0, 0)
    if entry.status is None or entry.status_stamp != status_stamp:
        try:
            entry.status, entry.status_stamp = folder.read_status(), status_stamp
        except JobUnreadable:
            return None
    entry.output = _read_on(folder.output, entry.output, _success)
    entry.errors = _read_on(folder.errors, entry.errors, _failure)
    return entry


@dataclass(frozen=True)
class ModelFigures:
    """One model's share of a job: the answers it made and their tokens."""

    model: str
    answers: int
    prompt_tokens: int
    output_tokens: int


def job_model_figures(folder: JobFolder) -> list[ModelFigures]:
    """A job's answers so far by the model each names (a LoRA adapter by its own name,
    beside its base), from its result file as read for :func:`studio_figures` (only what
    was appended since the last read); [] when the job cannot be read."""
    with _lock:
        entry = _job(folder)
    if entry is None:
        return []
    read = entry.output
    return [
        ModelFigures(model, n, read.prompt_tokens[model], read.output_tokens[model])
        for model, n in sorted(read.answers.items())
    ]


def _model(spec: JobSpec) -> str:
    names = spec.model_names()
    return names[0] if names else spec.engine.model_name


def _first_token_seconds(status: JobStatus) -> float | None:
    """From the job's last queueing (its creation, or a resume) to its run's first token."""
    if status.first_token_at is None:
        return None
    queued = [h["at"] for h in status.history if h.get("state") in WAITING_STATES]
    if not queued:
        return None
    return max(status.first_token_at - datetime.fromisoformat(queued[-1]).timestamp(), 0.0)


def _kv_cache_usage(metrics: Path) -> float | None:
    """The KV cache share in use in the last sample of a running job (None without one)."""
    try:
        with metrics.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(size - TAIL_BYTES, 0))
            lines = handle.read().splitlines()
    except OSError:
        return None
    for raw in reversed(lines):
        try:
            engine = msgspec.json.decode(raw).get("engine")
        except (msgspec.DecodeError, AttributeError):
            continue  # a torn last line, or the first one cut by the tail
        usage = engine.get("kv_cache_usage") if isinstance(engine, dict) else None
        return float(usage) if isinstance(usage, int | float) else None
    return None


def studio_figures(jobs_dir: Path, keep: Callable[[JobSpec], bool] | None = None) -> StudioFigures:
    """The figures of every job in ``jobs_dir`` (only those ``keep`` admits, when given:
    an API key's own)."""
    figures = StudioFigures()
    folders = list_jobs(jobs_dir)
    with _lock:
        for gone in set(_jobs) - {f.path for f in folders}:
            del _jobs[gone]
        for folder in folders:
            entry = _job(folder)
            if entry is None or entry.status is None:
                figures.unreadable += entry is None and keep is None  # nobody's: the studio's
                continue
            if keep is not None and not keep(entry.spec):
                continue
            _add(figures, folder, entry.spec, entry.status, entry)
    return figures


def _add(
    figures: StudioFigures, folder: JobFolder, spec: JobSpec, status: JobStatus, entry: _Job
) -> None:
    owner, model = spec.owner or "", _model(spec)
    state = INTERRUPTED if status.interrupted else status.state.value
    figures.jobs[state, owner] += 1
    if status.state in WAITING_STATES:
        figures.queued_lines[owner] += status.left if status.total else spec.input_lines
    running = not status.is_final and state != INTERRUPTED and status.state not in WAITING_STATES
    if running:
        figures.running_requests[model, owner] += status.in_flight
        usage = _kv_cache_usage(folder.metrics)
        if usage is not None:  # jobs on one model share its engine: its largest reading
            figures.kv_cache_usage[model] = max(usage, figures.kv_cache_usage.get(model, 0.0))
    answers = entry.output
    if answers.answers:  # by the model each answer names: one job may run several (adapters)
        for name, count in answers.answers.items():
            figures.prompt_tokens[name, owner] += answers.prompt_tokens[name]
            figures.output_tokens[name, owner] += answers.output_tokens[name]
            figures.succeeded[name, owner] += count
    else:  # no answer file here (its output went to object storage): the status's totals
        figures.prompt_tokens[model, owner] += status.prompt_tokens
        figures.output_tokens[model, owner] += status.completion_tokens
        figures.succeeded[model, owner] += status.succeeded
    figures.reused[owner] += status.reused
    for code, n in entry.errors.errors.items():
        figures.errors[model, code] += n
    figures.latency.setdefault(model, Histogram(LATENCY_BUCKETS)).add(entry.output.latency)
    waited = _first_token_seconds(status)
    if waited is not None:
        figures.first_token.setdefault(model, Histogram(FIRST_TOKEN_BUCKETS)).observe(waited)
