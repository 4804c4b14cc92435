"""The price table the user edits, kept as ``prices.json`` in the data folder.

Each local model has either a price per million input and output tokens (what a hosted
API would charge, to compare with) or a GPU-hour price, turned into a cost from the
throughput measured on this machine (see :mod:`core.plan.estimate`). The table also holds the
budget threshold above which a run asks for an explicit confirmation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError

from core.config import data_paths
from core.files import write_atomic
from core.schemas import Model, problems_of, to_json

PRICES_FILE = "prices.json"
MONEY_DIGITS = 3  # significant figures of an amount under one unit of the currency


def format_money(amount: float | None, currency: str = "") -> str:
    """An amount as people read money, in every page and the command line: cents from
    one unit up (``1,234.50``), else :data:`MONEY_DIGITS` significant figures
    (``0.000915``), so that a small cost never reads as ``0.00``; None is ``unknown``."""
    if amount is None or not math.isfinite(amount):
        return "unknown"
    if amount == 0 or abs(amount) >= 1:
        text = f"{amount:,.2f}"
    else:
        decimals = MONEY_DIGITS - 1 - math.floor(math.log10(abs(amount)))
        text = f"{amount:.{decimals}f}".rstrip("0")
    return f"{text} {currency}".strip()


NO_PRICE = "no price"


def cost_text(amount: float | None, currency: str = "") -> str:
    """A cost that is None (or NaN) for want of a price: "no price", never ``0.00`` (free)
    nor "unknown"; else :func:`format_money`."""
    if amount is None or not math.isfinite(amount):
        return NO_PRICE
    return format_money(amount, currency)


def _blank_is_none(value: Any) -> Any:
    """An empty cell of the editable table (None, NaN or blank text) means "not set"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str) and not value.strip():
        return None
    return value


Price = Annotated[
    Annotated[float, Field(ge=0, allow_inf_nan=False)] | None, BeforeValidator(_blank_is_none)
]


class PriceError(ValueError):
    """Prices that cannot be used; the message names the model and the column."""


class ModelPrice(Model):
    """What one local model costs; ``None`` where the user has not said."""

    input_per_1m: Price = None
    output_per_1m: Price = None
    gpu_hour: Price = None

    @property
    def empty(self) -> bool:
        return self.input_per_1m is None and self.output_per_1m is None and self.gpu_hour is None


class PriceTable(Model):
    """Prices by local model name, and the budget (in the same currency) a run may spend."""

    models: dict[str, ModelPrice] = Field(default_factory=dict)
    budget: Price = None
    currency: str = "USD"

    def price(self, model: str) -> ModelPrice:
        return self.models.get(model) or ModelPrice()

    def of(self, model: str | None) -> ModelPrice:
        """The price ``model`` is charged: its own, else the ``*`` row's (the models not
        listed), else none."""
        return self.models.get(str(model or "")) or self.price("*")


@dataclass(frozen=True)
class Usage:
    """What a set of one model's results used. The engine computed ``computed`` answers
    (their tokens, and its running time for them: ``engine_seconds``, None where unknown);
    ``reused`` answers were given again, never computed (docs/reuse.md): their tokens, and
    the running time their originals took (``reused_engine_seconds``)."""

    computed: int = 0
    prompt_tokens: float = 0
    completion_tokens: float = 0
    engine_seconds: float | None = None
    reused: int = 0
    reused_prompt_tokens: float = 0
    reused_completion_tokens: float = 0
    reused_engine_seconds: float | None = None


@dataclass(frozen=True)
class Cost:
    """What a :class:`Usage` cost (``spent``) and what its reused answers would have cost
    had they been computed (``saved``); None: unknown (no price, or no time to price)."""

    spent: float | None
    saved: float | None


def usage_cost(prices: PriceTable, model: str | None, usage: Usage) -> Cost:
    """The one pricing rule, that Upload & check's estimate, Results and Dashboards call.

    A model's price per 1M tokens, where it has one, prices the tokens its engine computed;
    else its GPU-hour price prices the engine's running time (never the wall time from a
    first to a last answer, which spans reused answers' original times and idle gaps).
    Reused answers cost nothing: what they would have cost is ``saved``, at the token
    price, or at the GPU-hour price over the time their originals took."""
    price = prices.of(model)
    if price.input_per_1m is not None or price.output_per_1m is not None:

        def tokens(prompt: float, completion: float) -> float:
            return (
                prompt * (price.input_per_1m or 0) + completion * (price.output_per_1m or 0)
            ) / 1e6

        return Cost(
            tokens(usage.prompt_tokens, usage.completion_tokens),
            tokens(usage.reused_prompt_tokens, usage.reused_completion_tokens),
        )
    if price.gpu_hour is not None:
        gpu_hour = price.gpu_hour

        def hours(answers: int, seconds: float | None) -> float | None:
            if not answers:
                return 0.0  # nothing ran
            return None if seconds is None else seconds / 3600 * gpu_hour

        return Cost(
            hours(usage.computed, usage.engine_seconds),
            hours(usage.reused, usage.reused_engine_seconds),
        )
    return Cost(None, None)


def prices_path(home: Path | None = None) -> Path:
    return (home or data_paths().home) / PRICES_FILE


def load_prices(home: Path | None = None) -> PriceTable:
    """The saved table; an empty one when there is none or it cannot be read."""
    try:
        return PriceTable.model_validate_json(prices_path(home).read_bytes())
    except (OSError, ValidationError):
        return PriceTable()


def save_prices(table: PriceTable, home: Path | None = None) -> Path:
    """Writes the table atomically (models with no price are left out)."""
    path = prices_path(home)
    kept = {name: price for name, price in table.models.items() if not price.empty}
    write_atomic(path, to_json(table.model_copy(update={"models": kept})))
    return path


PRICE_COLUMNS = {
    "input_per_1m": "Input / 1M tokens",
    "output_per_1m": "Output / 1M tokens",
    "gpu_hour": "GPU hour",
}


def price_rows(table: PriceTable, models: list[str]) -> list[dict[str, Any]]:
    """Rows for an editable table: one per model, its prices (empty where unset)."""
    rows = []
    for model in models:
        price = table.price(model)
        row: dict[str, Any] = {"model": model}
        row.update({label: getattr(price, name) for name, label in PRICE_COLUMNS.items()})
        rows.append(row)
    return rows


def table_from_rows(
    rows: list[dict[str, Any]], base: PriceTable, budget: float | None
) -> PriceTable:
    """The price table after the user's edits (models not shown keep their prices).

    Raises:
        PriceError: a price that is not a number of zero or more, naming model and column.
    """
    models = dict(base.models)
    problems = []
    for row in rows:
        name = row.get("model")
        if not name:
            continue
        values = {field: row.get(label) for field, label in PRICE_COLUMNS.items()}
        try:
            price = ModelPrice.model_validate(values)
        except ValidationError as exc:
            for problem in problems_of(exc):
                field, _, reason = problem.partition(": ")
                problems.append(f"{name}, {PRICE_COLUMNS.get(field, field)}: {reason}")
            continue
        # A model with no price is not kept (as save_prices does), so an unedited table
        # equals the saved one and a page that shows it writes nothing.
        if price.empty:
            models.pop(str(name), None)
        else:
            models[str(name)] = price
    if problems:
        raise PriceError("; ".join(problems))
    return PriceTable(models=models, budget=budget, currency=base.currency)
