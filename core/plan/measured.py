"""What earlier runs measured, per model on this machine: speed, load time, answer lengths.

The worker records each run of a model (:func:`record_run`); estimates and the Monitor's
ETA read them back (:func:`model_record`). Answer lengths are kept as measured, with the
limit they ran under, so an answer length can be predicted for another limit: each
measured answer is replayed against the new limit (:meth:`ModelRecord.expected_tokens`).
A ``max_tokens=8`` run therefore says nothing wrong about a ``max_tokens=64`` file: its
truncated answers only tell that an answer is at least 8 tokens long.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, Field, ValidationError

from core.config import data_paths
from core.files import read_json, write_json_atomic

M = TypeVar("M", bound=BaseModel)
MEASURED_FILE = "throughput.json"
RUNS_KEPT = 20
ANSWERS_KEPT = 2_000


class RunMeasurement(BaseModel):
    """The speed of one finished run (model load excluded). An embedding model's run has
    no output: its speed is in input tokens (None in runs recorded before it was kept)."""

    output_tokens_per_s: float = Field(ge=0)
    requests_per_s: float = Field(gt=0)
    input_tokens_per_s: float | None = Field(default=None, gt=0)
    requests: int = 0
    measured_at: str = ""


class Answer(BaseModel):
    """One measured answer: its length, the limit it ran under, and whether it hit it."""

    tokens: int = Field(ge=0)
    limit: int = Field(ge=1)
    truncated: bool

    def replayed(self, limit: int) -> float:
        """This answer's length had it run under ``limit``.

        A complete answer keeps its length (cut at the new limit); a truncated one is at
        least as long as it got, so under a higher limit it counts as reaching that limit
        (the estimate errs long, never short)."""
        if not self.truncated or limit <= self.tokens:
            return min(self.tokens, limit)
        return limit


class ModelRecord(BaseModel):
    """Everything measured for one model (keyed by its folder's name)."""

    runs: list[RunMeasurement] = Field(default_factory=list)
    load_seconds: float | None = None
    answers: list[Answer] = Field(default_factory=list)
    # Seconds per engine step: step_base + step_per_request x requests running.
    step_base: float | None = None
    step_per_request: float | None = None

    @property
    def throughput(self) -> RunMeasurement | None:
        """The newest run's speed, or None when no run was measured."""
        return self.runs[-1] if self.runs else None

    def expected_tokens(self, limit: int) -> float | None:
        """The expected length of one answer under ``limit``; None without measured answers."""
        if not self.answers:
            return None
        return sum(a.replayed(limit) for a in self.answers) / len(self.answers)


def _path(home: Path | None) -> Path:
    return (home or data_paths().home) / MEASURED_FILE


def _read_all(home: Path | None) -> dict[str, object]:
    data = read_json(_path(home), {})
    return data if isinstance(data, dict) else {}


def _parse(raw: object) -> ModelRecord:
    """A stored record; the first format (a bare list of runs) and bad entries are read as
    far as they go, so one damaged value never hides the rest."""
    if isinstance(raw, list):
        raw = {"runs": raw}
    if not isinstance(raw, dict):
        return ModelRecord()

    def valid(model: type[M], name: str) -> list[M]:
        found = []
        for entry in raw.get(name) or []:
            try:
                found.append(model.model_validate(entry))
            except ValidationError:
                continue
        return found

    def number(name: str) -> float | None:
        value = raw.get(name)
        return float(value) if isinstance(value, int | float) and value >= 0 else None

    return ModelRecord(
        runs=valid(RunMeasurement, "runs"),
        load_seconds=number("load_seconds"),
        answers=valid(Answer, "answers"),
        step_base=number("step_base"),
        step_per_request=number("step_per_request"),
    )


def model_record(model_name: str, home: Path | None = None) -> ModelRecord:
    """What was measured for a model (empty when nothing was)."""
    return _parse(_read_all(home).get(model_name))


def record_run(
    model_name: str,
    *,
    output_tokens: int,
    input_tokens: int = 0,
    requests: int,
    seconds: float,
    answers: list[Answer],
    load_seconds: float | None = None,
    step_time: tuple[float, float] | None = None,
    home: Path | None = None,
) -> None:
    """Adds a finished run's measurements for a model.

    Args:
        model_name: the local model's name (its folder's name, as in output lines).
        output_tokens: tokens generated in the run.
        input_tokens: prompt (or embedded) tokens the run read.
        requests: requests finished in the run.
        seconds: the run's wall time, model load excluded.
        answers: the lengths of its answers with their limits.
        load_seconds: the time the model took to load, when this run loaded it.
        step_time: ``(base, per request)`` seconds of an engine step, fitted on this run.
        home: the data folder (default: ``BATCH_STUDIO_HOME``).
    """
    data = _read_all(home)
    record = _parse(data.get(model_name))
    if (output_tokens > 0 or input_tokens > 0) and requests > 0 and seconds > 0:
        record.runs.append(
            RunMeasurement(
                output_tokens_per_s=output_tokens / seconds,
                input_tokens_per_s=input_tokens / seconds if input_tokens > 0 else None,
                requests_per_s=requests / seconds,
                requests=requests,
                measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
            )
        )
    if load_seconds:
        record.load_seconds = load_seconds
    if step_time is not None:
        record.step_base, record.step_per_request = step_time
    record.runs = record.runs[-RUNS_KEPT:]
    record.answers = (record.answers + answers)[-ANSWERS_KEPT:]
    data[model_name] = record.model_dump()
    write_json_atomic(_path(home), data)
