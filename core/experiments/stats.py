"""The statistics of an experiment's comparison, in one place.

- **Wilson score interval** (95 %) for a pass rate: the studio's one, of Review and
  Checks (:func:`core.store.review.wilson`); it stays inside [0, 1] and is honest at 0 or
  n passes and for small n, where the normal ("Wald") interval is not.
- **McNemar's exact test** for two variants' pass/fail on the same items: only the items
  where they disagree count (b: the baseline passes and the other fails; c: the reverse);
  under no difference each is b or c with probability 1/2, so the two-sided p-value is
  twice the binomial tail ``P(X <= min(b, c))`` for ``X ~ Binomial(b + c, 1/2)``, at most 1.
- **Paired bootstrap** for two variants' mean score on the same items: the per-item
  differences resampled with replacement (a fixed seed, so the page says the same thing
  on every rerun); the two-sided p-value is twice the smaller share of resampled means on
  either side of 0, at most 1.

Written out here (scipy is not a dependency); ``tests/unit/test_experiment_stats.py``
checks them against known values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core.store.review import wilson

__all__ = ["mcnemar_exact", "p_text", "paired_bootstrap", "percentile", "wilson"]

ALPHA = 0.05  # a difference is called significant below this p-value
RESAMPLES = 2000
SEED = 43
_CHUNK = 250  # resamples drawn at a time (6,000 items x 250 stays a few MB)


def mcnemar_exact(b: int, c: int) -> float:
    """McNemar's exact two-sided p-value from the two kinds of discordant pair."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    # The largest term, P(X = k), in logs (no overflow for thousands of items); the
    # smaller ones from it by the ratio C(n, i - 1) / C(n, i) = i / (n - i + 1).
    term = math.exp(
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2)
    )
    tail = 0.0
    for i in range(k, -1, -1):
        tail += term
        term *= i / (n - i + 1)
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Bootstrap:
    """A paired bootstrap's outcome: the mean difference (other - baseline), its 95 %
    percentile interval and the two-sided p-value."""

    difference: float
    low: float
    high: float
    p: float
    n: int


def paired_bootstrap(
    baseline: np.ndarray, other: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED
) -> Bootstrap:
    """The paired bootstrap of ``other - baseline`` over the items both have (NaN: none)."""
    a, b = np.asarray(baseline, float), np.asarray(other, float)
    keep = ~(np.isnan(a) | np.isnan(b))
    diff = b[keep] - a[keep]
    n = len(diff)
    if n == 0:
        return Bootstrap(math.nan, math.nan, math.nan, 1.0, 0)
    rng = np.random.default_rng(seed)
    means = np.concatenate(
        [
            diff[rng.integers(0, n, size=(min(_CHUNK, resamples - start), n))].mean(axis=1)
            for start in range(0, resamples, _CHUNK)
        ]
    )
    p = min(1.0, 2 * min(float((means <= 0).mean()), float((means >= 0).mean())))
    low, high = np.percentile(means, [2.5, 97.5])
    return Bootstrap(float(diff.mean()), float(low), float(high), p, n)


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (linear interpolation) of the known values; None if none."""
    known = [v for v in values if v is not None and v == v]
    return float(np.percentile(known, q)) if known else None


def p_text(p: float) -> str:
    """A p-value as the verdicts print it: two significant figures, p < 0.001 below that."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"
