"""What a checked batch will cost and how long it will take, before it runs.

Input tokens come from the check (counted with the model's tokenizer). Output tokens have
two figures: the maximum (every answer as long as ``max_tokens`` allows) and an expected
one: the average answer length measured on earlier runs of the same model, or a share of
the maximum the user chooses while no run has been measured. Time needs a measured
throughput for the model on this machine: the worker records one after each run with
:func:`record_throughput`; until then the estimate says plainly that it has none.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.check import CheckReport
from core.config import data_paths
from core.files import write_json_atomic
from core.plan.pricing import PriceTable

THROUGHPUT_FILE = "throughput.json"
HISTORY = 20  # measurements kept per model
DEFAULT_EXPECTED_SHARE = 0.5


@dataclass(frozen=True)
class Throughput:
    """A throughput measured on a real run of one model on this machine."""

    model: str
    output_tokens_per_s: float
    requests_per_s: float
    measured_at: str

    @property
    def output_tokens_per_request(self) -> float:
        return self.output_tokens_per_s / self.requests_per_s if self.requests_per_s else 0.0


def _throughput_path(home: Path | None) -> Path:
    return (home or data_paths().home) / THROUGHPUT_FILE


def _read_all(home: Path | None) -> dict[str, list[dict[str, Any]]]:
    try:
        data = json.loads(_throughput_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_throughput(
    model_name: str,
    output_tokens_per_s: float,
    requests_per_s: float,
    home: Path | None = None,
) -> None:
    """Stores a measurement from a finished run (the newest is the one estimates use).

    Args:
        model_name: the local model's name (its folder's name, as in output lines).
        output_tokens_per_s: generated tokens per second of wall time, model load excluded.
        requests_per_s: requests finished per second over the same time.
        home: the data folder (default: ``BATCH_STUDIO_HOME``).
    """
    if output_tokens_per_s <= 0 or requests_per_s <= 0:
        return  # a run that produced nothing says nothing about speed
    data = _read_all(home)
    entries = [e for e in data.get(model_name, []) if isinstance(e, dict)]
    entries.append(
        {
            "output_tokens_per_s": float(output_tokens_per_s),
            "requests_per_s": float(requests_per_s),
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    data[model_name] = entries[-HISTORY:]
    write_json_atomic(_throughput_path(home), data)


def measured_throughput(model_name: str, home: Path | None = None) -> Throughput | None:
    """The newest measurement for a model, or None when no run has been measured yet."""
    for entry in reversed(_read_all(home).get(model_name) or []):
        try:
            otps = float(entry["output_tokens_per_s"])
            rps = float(entry["requests_per_s"])
        except (KeyError, TypeError, ValueError):
            continue
        if otps > 0 and rps > 0:
            return Throughput(model_name, otps, rps, str(entry.get("measured_at", "")))
    return None


@dataclass
class ModelEstimate:
    """The estimate for the lines that run on one local model."""

    model: str
    lines: int
    input_tokens: int
    max_output_tokens: int
    expected_output_tokens: int
    expected_basis: str
    throughput: Throughput | None
    seconds: float | None
    cost: float | None
    max_cost: float | None
    cost_basis: str


@dataclass
class JobEstimate:
    """The estimate for a whole file, per local model and in total."""

    models: list[ModelEstimate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    budget: float | None = None
    currency: str = "USD"

    @property
    def input_tokens(self) -> int:
        return sum(m.input_tokens for m in self.models)

    @property
    def max_output_tokens(self) -> int:
        return sum(m.max_output_tokens for m in self.models)

    @property
    def expected_output_tokens(self) -> int:
        return sum(m.expected_output_tokens for m in self.models)

    @property
    def seconds(self) -> float | None:
        """Total time, or None when a model has no measured throughput."""
        if not self.models or any(m.seconds is None for m in self.models):
            return None
        return sum(m.seconds for m in self.models)

    @property
    def cost(self) -> float | None:
        """Total expected cost, or None when a model has no usable price."""
        if not self.models or any(m.cost is None for m in self.models):
            return None
        return sum(m.cost for m in self.models)

    @property
    def over_budget(self) -> bool:
        """True when the expected cost is known and above the budget: ask before running."""
        cost = self.cost
        return self.budget is not None and cost is not None and cost > self.budget

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("input_tokens", "max_output_tokens", "expected_output_tokens"):
            data[name] = getattr(self, name)
        data["seconds"] = self.seconds
        data["cost"] = self.cost
        data["over_budget"] = self.over_budget
        return data


def _cost(
    price: Any,
    input_tokens: int,
    output_tokens: int,
    seconds: float | None,
    throughput: Throughput | None = None,
) -> tuple[float | None, str]:
    if price.input_per_1m is not None or price.output_per_1m is not None:
        cost = (
            input_tokens * (price.input_per_1m or 0.0)
            + output_tokens * (price.output_per_1m or 0.0)
        ) / 1e6
        return cost, "price per 1M tokens"
    if price.gpu_hour is not None:
        if seconds is None:
            return None, "a GPU-hour price needs a measured throughput"
        basis = "GPU-hour price x estimated time"
        if throughput is not None:
            per_million = price.gpu_hour / (throughput.output_tokens_per_s * 3600) * 1e6
            basis += (
                f" (= {per_million:,.2f} per 1M output tokens at the measured "
                f"{throughput.output_tokens_per_s:,.0f} tokens/s)"
            )
        return seconds / 3600 * price.gpu_hour, basis
    return None, "no price set for this model"


def estimate(
    report: CheckReport,
    prices: PriceTable,
    *,
    expected_share: float = DEFAULT_EXPECTED_SHARE,
    home: Path | None = None,
) -> JobEstimate:
    """Tokens, time and cost of the valid lines of a checked file.

    Args:
        report: a report from ``check_file`` with a model folder (tokens counted).
        prices: the price table (and budget).
        expected_share: the share of ``max_tokens`` an answer is expected to use while
            no run of the model has been measured.
        home: the data folder holding the throughput measurements.
    """
    result = JobEstimate(budget=prices.budget, currency=prices.currency)
    if not report.valid:
        result.notes.append("no estimate: the file has no valid lines")
        return result
    if not report.by_local_model:
        result.notes.append(
            "no estimate: prompt tokens were not counted (check the file with a model folder)"
        )
        return result
    for local in report.by_local_model.values():
        name = local["name"]
        lines, max_out = local["lines"], local["max_output_tokens"]
        measured = measured_throughput(name, home)
        if measured is not None:
            per_request = measured.output_tokens_per_request
            expected = min(max_out, round(lines * per_request))
            basis = f"{per_request:.0f} tokens per answer, measured {measured.measured_at}"
            seconds = expected / measured.output_tokens_per_s
        else:
            expected = round(max_out * expected_share)
            basis = f"{expected_share:.0%} of max_tokens (no run of {name} measured yet)"
            seconds = None
            result.notes.append(
                f"no throughput measured yet for {name} on this machine: no time estimate "
                "(a finished run records one)"
            )
        price = prices.price(name)
        cost, cost_basis = _cost(price, local["prompt_tokens"], expected, seconds, measured)
        max_seconds = seconds * max_out / expected if seconds is not None and expected else None
        max_cost, _ = _cost(price, local["prompt_tokens"], max_out, max_seconds)
        result.models.append(
            ModelEstimate(
                name,
                lines,
                local["prompt_tokens"],
                max_out,
                expected,
                basis,
                measured,
                seconds,
                cost,
                max_cost,
                cost_basis,
            )
        )
    return result


def format_duration(seconds: float | None) -> str:
    """``1 h 05 min``, ``4 min 10 s``, ``12 s``; "unknown" for None."""
    if seconds is None:
        return "unknown"
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


def estimate_lines(result: JobEstimate) -> list[str]:
    """The estimate as short lines of text (for the command line)."""
    lines = []
    for m in result.models:
        cost = f"{m.cost:,.4f} {result.currency}" if m.cost is not None else m.cost_basis
        lines.append(
            f"{m.model}: {m.lines:,} requests, {m.input_tokens:,} input tokens, output "
            f"{m.expected_output_tokens:,} expected ({m.expected_basis}) / "
            f"{m.max_output_tokens:,} at most; time {format_duration(m.seconds)}; cost {cost}"
        )
    if result.models:
        total = f"{result.cost:,.4f} {result.currency}" if result.cost is not None else "unknown"
        lines.append(f"total: time {format_duration(result.seconds)}, cost {total}")
    if result.budget is not None:
        if result.cost is None:
            verdict = "the cost is unknown, so it cannot be compared (set a price)"
        elif result.over_budget:
            verdict = "OVER budget: a run needs explicit confirmation"
        else:
            verdict = "within budget"
        lines.append(f"budget {result.budget:,.2f} {result.currency}: {verdict}")
    lines.extend(result.notes)
    return lines
