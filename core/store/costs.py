"""What results cost, by the one pricing rule (:func:`core.plan.pricing.usage_cost`), from
the index: Results' total and Dashboards' cost column read the same figures, so a job costs
the same on both.

A GPU-hour price is charged on the time the job's engine ran (``jobs.engine_seconds``: its
running time over all its runs), shared out equally among the answers it computed, so a
share of a job (a filter, a day) costs its share. A reused answer costs nothing and saved
its original's share of its own job's time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from core.plan.pricing import NO_PRICE, PriceTable, Usage, cost_text, format_money, usage_cost
from core.store.db import Store

# Each job's engine time per answer it computed: its running time over all runs, or (a job
# indexed before that was kept) the time from its first to its last computed answer.
_SHARES = """
    SELECT r.job_id,
           coalesce(any_value(j.engine_seconds),
                    epoch(max(r.created_at)) - epoch(min(r.created_at))) / count(*) AS each_s
    FROM results r LEFT JOIN jobs j ON j.job_id = r.job_id
    WHERE r.reused_from IS NULL
    GROUP BY r.job_id
"""

USAGE_COLUMNS = (
    "computed", "prompt_tokens", "completion_tokens", "engine_seconds",
    "reused", "reused_prompt_tokens", "reused_completion_tokens", "reused_engine_seconds",
)  # fmt: skip


def usage(store: Store, group: str, where: str, params: list[Any]) -> pd.DataFrame:
    """Per ``group`` (SQL over ``results r`` and ``jobs j``) and model: the columns of a
    :class:`core.plan.pricing.Usage` of the results ``where`` picks."""
    return store.query(
        f"""
        WITH shares AS ({_SHARES})
        SELECT {group} AS grp, coalesce(r.model, '') AS model,
               count(*) FILTER (WHERE r.reused_from IS NULL) AS computed,
               coalesce(sum(r.prompt_tokens) FILTER (WHERE r.reused_from IS NULL), 0)
                   AS prompt_tokens,
               coalesce(sum(r.completion_tokens) FILTER (WHERE r.reused_from IS NULL), 0)
                   AS completion_tokens,
               sum(s.each_s) FILTER (WHERE r.reused_from IS NULL) AS engine_seconds,
               count(r.reused_from) AS reused,
               coalesce(sum(r.prompt_tokens) FILTER (WHERE r.reused_from IS NOT NULL), 0)
                   AS reused_prompt_tokens,
               coalesce(sum(r.completion_tokens) FILTER (WHERE r.reused_from IS NOT NULL), 0)
                   AS reused_completion_tokens,
               sum(o.each_s) FILTER (WHERE r.reused_from IS NOT NULL) AS reused_engine_seconds
        FROM results r LEFT JOIN jobs j ON j.job_id = r.job_id
        LEFT JOIN shares s ON s.job_id = r.job_id
        LEFT JOIN shares o ON o.job_id = r.reused_from
        {where}
        GROUP BY 1, 2 ORDER BY 1, 2
        """,
        params,
    )


def _number(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def costs(frame: pd.DataFrame, prices: PriceTable) -> pd.DataFrame:
    """Per group of a :func:`usage` frame: ``cost`` and ``cost_saved`` (NaN: unknown, no
    group's model had a price), ``engine_seconds``, and ``unpriced``, the models left out
    of the cost for want of a price."""
    rows: dict[Any, dict[str, Any]] = {}
    for _, row in frame.iterrows():
        spent = usage_cost(
            prices,
            row["model"],
            Usage(
                computed=int(row["computed"]),
                prompt_tokens=float(row["prompt_tokens"]),
                completion_tokens=float(row["completion_tokens"]),
                engine_seconds=_number(row["engine_seconds"]),
                reused=int(row["reused"]),
                reused_prompt_tokens=float(row["reused_prompt_tokens"]),
                reused_completion_tokens=float(row["reused_completion_tokens"]),
                reused_engine_seconds=_number(row["reused_engine_seconds"]),
            ),
        )
        group = rows.setdefault(
            row["grp"],
            {"cost": None, "cost_saved": None, "engine_seconds": 0.0, "reused": 0, "unpriced": []},
        )
        group["reused"] += int(row["reused"])
        if spent.spent is None:
            group["unpriced"].append(row["model"] or "(none)")
        else:
            group["cost"] = (group["cost"] or 0.0) + spent.spent
        if spent.saved is not None:
            group["cost_saved"] = (group["cost_saved"] or 0.0) + spent.saved
        group["engine_seconds"] += _number(row["engine_seconds"]) or 0.0
    out = pd.DataFrame.from_dict(rows, orient="index")
    if out.empty:
        return pd.DataFrame(columns=["cost", "cost_saved", "engine_seconds", "reused", "unpriced"])
    return out.astype({"cost": float, "cost_saved": float})


@dataclass(frozen=True)
class Total:
    """The cost of a set of results and what reuse saved them, as one line of text."""

    results: int
    cost: float | None
    saved: float | None
    reused: int
    unpriced: list[str]
    currency: str

    def __str__(self) -> str:
        text = format_money(self.cost, self.currency) if self.cost is not None else NO_PRICE
        if self.reused and self.saved is not None:
            text += (
                f" (+{format_money(self.saved, self.currency)} saved by reusing {self.reused:,})"
            )
        if self.unpriced:
            text += f"; no price for {', '.join(sorted(set(self.unpriced)))}"
        return text


def total(store: Store, where: str, params: list[Any], prices: PriceTable) -> Total:
    """The cost of the results ``where`` picks (over ``results r``), all in one group."""
    frame = usage(store, "'all'", where, params)
    priced = costs(frame, prices)
    if priced.empty:
        return Total(0, None, None, 0, [], prices.currency)
    row = priced.iloc[0]
    return Total(
        int(frame["computed"].sum() + frame["reused"].sum()),
        None if pd.isna(row["cost"]) else float(row["cost"]),
        None if pd.isna(row["cost_saved"]) else float(row["cost_saved"]),
        int(row["reused"]),
        list(row["unpriced"]),
        prices.currency,
    )


def each(store: Store, keys: list[tuple[str, str]], prices: PriceTable) -> list[str]:
    """Each result's cost as a page's column shows it (the results by ``(job, custom_id)``,
    in that order): its cost, or for a reused answer what it saved."""
    joined = [f"{job}\0{custom_id}" for job, custom_id in keys]
    group = "r.job_id || chr(0) || r.custom_id"
    priced = costs(usage(store, group, f"WHERE list_contains(?, {group})", [joined]), prices)
    shown = []
    for key in joined:
        if key not in priced.index:
            shown.append(NO_PRICE)
            continue
        row = priced.loc[key]
        if row["reused"]:
            saved = row["cost_saved"]
            shown.append("reused" if pd.isna(saved) else f"reused, saved {cost_text(saved)}")
        else:
            shown.append(cost_text(row["cost"]))
    return shown
