"""The price table the user edits, kept as ``prices.json`` in the data folder.

Each local model has either a price per million input and output tokens (what a hosted
API would charge, to compare with) or a GPU-hour price, turned into a cost from the
throughput measured on this machine (see :mod:`core.plan.estimate`). The table also holds the
budget threshold above which a run asks for an explicit confirmation.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.config import data_paths
from core.files import write_json_atomic

PRICES_FILE = "prices.json"


@dataclass
class ModelPrice:
    """What one local model costs; ``None`` where the user has not said."""

    input_per_1m: float | None = None
    output_per_1m: float | None = None
    gpu_hour: float | None = None

    @property
    def empty(self) -> bool:
        return self.input_per_1m is None and self.output_per_1m is None and self.gpu_hour is None


@dataclass
class PriceTable:
    """Prices by local model name, and the budget (in the same currency) a run may spend."""

    models: dict[str, ModelPrice] = field(default_factory=dict)
    budget: float | None = None
    currency: str = "USD"

    def price(self, model: str) -> ModelPrice:
        return self.models.get(model) or ModelPrice()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def prices_path(home: Path | None = None) -> Path:
    return (home or data_paths().home) / PRICES_FILE


def load_prices(home: Path | None = None) -> PriceTable:
    """The saved table; an empty one when there is none or it cannot be read."""
    try:
        data = json.loads(prices_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return PriceTable()
    if not isinstance(data, dict):
        return PriceTable()
    models = {}
    for name, entry in (data.get("models") or {}).items():
        if isinstance(entry, dict):
            models[str(name)] = ModelPrice(
                _number(entry.get("input_per_1m")),
                _number(entry.get("output_per_1m")),
                _number(entry.get("gpu_hour")),
            )
    currency = data.get("currency") if isinstance(data.get("currency"), str) else "USD"
    return PriceTable(models, _number(data.get("budget")), currency)


def save_prices(table: PriceTable, home: Path | None = None) -> Path:
    """Writes the table atomically (a temporary file, then a rename)."""
    path = prices_path(home)
    data = {
        "currency": table.currency,
        "budget": table.budget,
        "models": {name: asdict(p) for name, p in table.models.items() if not p.empty},
    }
    write_json_atomic(path, data)
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
    """The price table after the user's edits (models not shown keep their prices)."""
    models = dict(base.models)
    for row in rows:
        name = row.get("model")
        if name:
            models[str(name)] = ModelPrice(
                *(_number(row.get(label)) for label in PRICE_COLUMNS.values())
            )
    return PriceTable(models, budget, base.currency)
