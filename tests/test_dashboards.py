"""Cost in the dashboards comes from the one saved price table."""

import pandas as pd

from core.dashboards import with_cost
from core.pricing import ModelPrice, PriceTable


def summary():
    return pd.DataFrame(
        [
            {"model": "tiny", "tokens_in": 2_000_000, "tokens_out": 1_000_000, "run_hours": 0.5},
            {"model": "other", "tokens_in": 1_000_000, "tokens_out": 0, "run_hours": None},
        ]
    )


def test_token_prices_and_gpu_hours_make_the_cost():
    prices = PriceTable({"tiny": ModelPrice(0.5, 2.0, 4.0)})
    costs = with_cost(summary(), prices)["cost"].tolist()
    assert costs == [2_000_000 * 0.5 / 1e6 + 1_000_000 * 2.0 / 1e6 + 0.5 * 4.0, 0.0]


def test_the_star_row_prices_models_not_listed():
    prices = PriceTable({"*": ModelPrice(1.0, 1.0, None)})
    assert with_cost(summary(), prices)["cost"].tolist() == [3.0, 1.0]
