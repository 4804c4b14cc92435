"""What a checked batch will cost and how long it will take, before it runs.

Input tokens come from the check (counted with the model's tokenizer). Output tokens have
two figures: the maximum (every answer as long as its line's ``max_tokens`` allows) and an
expected one: the answers measured on earlier runs of the same model replayed against each
line's own limit (:mod:`core.plan.measured`), or a share of the maximum the user chooses
while no answer of the model has been measured. Time is the expected output at the model's
measured speed (an embedding model writes no tokens: its input at its measured input speed),
plus its measured load time unless a worker has it loaded now; until a run of the model has
been measured, the estimate says plainly that it has no time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.check import CheckReport
from core.plan.measured import ModelRecord, model_record
from core.plan.pricing import NO_PRICE, PriceTable, Usage, format_money, usage_cost

DEFAULT_EXPECTED_SHARE = 0.5


def expected_output_tokens(record: ModelRecord, limits: dict[str, int]) -> float | None:
    """Expected output tokens of answers under the given limits (``{max_tokens: answers}``),
    from the model's measured answers; None when none were measured."""
    total = 0.0
    for limit, answers in limits.items():
        per_answer = record.expected_tokens(int(limit))
        if per_answer is None:
            return None
        total += per_answer * answers
    return total


@dataclass
class ModelEstimate:
    """The estimate for the lines that run on one local model."""

    model: str
    lines: int
    input_tokens: int
    max_output_tokens: int
    expected_output_tokens: int
    expected_basis: str
    tokens_per_s: float | None  # measured here (input tokens for embeddings); None before
    load_seconds: float
    seconds: float | None
    cost: float | None
    max_cost: float | None
    cost_basis: str
    embedding: bool = False  # vectors: no output; time from input tokens
    loaded: bool = False  # the engine holds the model now: no load time counted


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
    def cost_text(self) -> str:
        """The total cost as the pages and the command line show it: "no price" when a
        model has none (never ``0.00``), "unknown" when a price cannot be turned into one."""
        if self.cost is not None:
            return format_money(self.cost, self.currency)
        if any(m.cost is None and m.cost_basis == NO_PRICE_BASIS for m in self.models):
            return NO_PRICE
        return format_money(None)

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
        data["cost_text"] = self.cost_text
        data["over_budget"] = self.over_budget
        return data


NO_PRICE_BASIS = "no price set for this model"


def _cost(
    prices: PriceTable,
    name: str,
    lines: int,
    input_tokens: int,
    output_tokens: float,
    seconds: float | None,
    rate: tuple[float, str] | None = None,
) -> tuple[float | None, str]:
    """The cost by the one pricing rule (:func:`core.plan.pricing.usage_cost`) and how it
    was reached; ``rate`` is the measured speed the time came from (tokens/s, and which
    tokens: "output" or "input")."""
    price = prices.of(name)
    usage = Usage(lines, input_tokens, output_tokens, engine_seconds=seconds)
    cost = usage_cost(prices, name, usage).spent
    if price.input_per_1m is not None or price.output_per_1m is not None:
        return cost, "price per 1M tokens"
    if price.gpu_hour is not None:
        if cost is None:
            return None, "a GPU-hour price needs a measured throughput"
        basis = "GPU-hour price x estimated time"
        if rate is not None:
            per_s, which = rate
            per_million = price.gpu_hour / (per_s * 3600) * 1e6
            basis += (
                f" (= {per_million:,.2f} per 1M {which} tokens at the measured "
                f"{per_s:,.0f} tokens/s)"
            )
        return cost, basis
    return None, NO_PRICE_BASIS


def _speed(local: dict[str, Any], record: ModelRecord) -> tuple[float, str] | None:
    """The measured speed time is reckoned by, and which tokens it counts: output tokens
    for a chat model, input tokens for an embedding model (it writes none)."""
    run = record.throughput
    if run is None:
        return None
    if local.get("embedding"):
        return (run.input_tokens_per_s, "input") if run.input_tokens_per_s else None
    return (run.output_tokens_per_s, "output") if run.output_tokens_per_s > 0 else None


def estimate(
    report: CheckReport,
    prices: PriceTable,
    *,
    expected_share: float = DEFAULT_EXPECTED_SHARE,
    loaded: frozenset[str] = frozenset(),
    home: Path | None = None,
) -> JobEstimate:
    """Tokens, time and cost of the valid lines of a checked file.

    Args:
        report: a report from ``check_file`` with a model folder (tokens counted).
        prices: the price table (and budget).
        expected_share: the share of ``max_tokens`` an answer is expected to use while
            no answer of the model has been measured.
        loaded: names of the models a worker holds loaded now (no load time for them).
        home: the data folder holding the measurements.
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
        result.models.append(_model_estimate(local, prices, expected_share, loaded, home))
        if result.models[-1].seconds is None:
            result.notes.append(
                f"no run of {local['name']} measured yet on this machine: no time estimate "
                "(a finished run records one)"
            )
    return result


def _model_estimate(
    local: dict[str, Any],
    prices: PriceTable,
    expected_share: float,
    loaded: frozenset[str],
    home: Path | None,
) -> ModelEstimate:
    name, lines, max_out = local["name"], local["lines"], local["max_output_tokens"]
    record = model_record(name, home)
    # The tokens time is reckoned by: a chat model's output, less the answers that are
    # copies of another (greedy n > 1: the engine writes one); an embedding model's input.
    if local.get("embedding"):
        expected, basis = 0, "none: an embedding model writes vectors, not tokens"
        work = most = local["prompt_tokens"]
    else:
        copied = local.get("copied") or {}
        # A report kept from before limits were counted: every line at the average limit.
        limits = local.get("limits") or {str(max(1, max_out // max(lines, 1))): lines}
        ran = {limit: answers - copied.get(limit, 0) for limit, answers in limits.items()}
        expected, basis = _expected_output(name, limits, max_out, record, expected_share)
        most = max_out - sum(int(limit) * answers for limit, answers in copied.items())
        work, _ = _expected_output(name, ran, most, record, expected_share)
    speed = _speed(local, record)
    load = 0.0 if name in loaded else (record.load_seconds or 0.0)
    seconds = work / speed[0] + load if speed is not None else None
    max_seconds = most / speed[0] + load if speed is not None else None
    prompt = local["prompt_tokens"]
    cost, cost_basis = _cost(prices, name, lines, prompt, expected, seconds, speed)
    max_cost, _ = _cost(prices, name, lines, prompt, max_out, max_seconds)
    return ModelEstimate(
        name,
        lines,
        local["prompt_tokens"],
        max_out,
        expected,
        basis,
        speed[0] if speed is not None else None,
        load,
        seconds,
        cost,
        max_cost,
        cost_basis,
        bool(local.get("embedding")),
        name in loaded,
    )


def _expected_output(
    name: str, limits: dict[str, int], max_out: int, record: ModelRecord, share: float
) -> tuple[int, str]:
    """The output tokens expected of answers under ``limits`` (``{max_tokens: answers}``,
    ``max_out`` tokens at most), and what they come from: the model's measured answers,
    else ``share`` of the most."""
    measured = expected_output_tokens(record, limits)
    if measured is not None:
        basis = (
            f"{len(record.answers):,} measured answers of {name}, each replayed against "
            "the line's max_tokens"
        )
        return min(max_out, round(measured)), basis
    return round(max_out * share), f"{share:.0%} of max_tokens (no answer of {name} measured yet)"


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


def load_note(model: str, loaded: bool, load_seconds: float) -> str:
    """What the time says about loading the model: left out (the engine holds it now),
    included, or nothing (no load measured yet)."""
    if loaded:
        return f"no model load: the engine holds {model} loaded now"
    return f"model load {format_duration(load_seconds)} included" if load_seconds else ""


def estimate_lines(result: JobEstimate) -> list[str]:
    """The estimate as short lines of text (for the command line)."""
    lines = []
    for m in result.models:
        cost = format_money(m.cost, result.currency) if m.cost is not None else m.cost_basis
        load = load_note(m.model, m.loaded, m.load_seconds)
        load = f" ({load})" if load else ""
        output = (
            "embeddings"
            if m.embedding
            else f"output {m.expected_output_tokens:,} expected ({m.expected_basis}) / "
            f"{m.max_output_tokens:,} at most"
        )
        lines.append(
            f"{m.model}: {m.lines:,} requests, {m.input_tokens:,} input tokens, {output}; "
            f"time {format_duration(m.seconds)}{load}; cost {cost}"
        )
    if result.models:
        total = result.cost_text
        lines.append(f"total: time {format_duration(result.seconds)}, cost {total}")
    if result.budget is not None:
        if result.cost is None:
            verdict = f"the cost is {result.cost_text}, so it cannot be compared (set a price)"
        elif result.over_budget:
            verdict = "OVER budget: a run needs explicit confirmation"
        else:
            verdict = "within budget"
        lines.append(f"budget {format_money(result.budget, result.currency)}: {verdict}")
    lines.extend(result.notes)
    return lines
