"""The statistics of an experiment's comparison (core/experiments/stats.py) against values
known from textbooks and R (binom.test, prop.test's Wilson interval)."""

from __future__ import annotations

import numpy as np
import pytest

from core.experiments import stats


@pytest.mark.parametrize(
    ("passed", "n", "low", "high"),
    [
        (5, 10, 0.2366, 0.7634),  # symmetric about one half
        (0, 10, 0.0, 0.2775),  # no pass: the interval still has width (Wald's would not)
        (10, 10, 0.7225, 1.0),
        (81, 263, 0.2553, 0.3662),  # Wikipedia's "binomial proportion" example
    ],
)
def test_wilson_bounds(passed, n, low, high):
    assert stats.wilson(passed, n) == pytest.approx((low, high), abs=1e-4)


def test_wilson_of_nothing_is_anything():
    assert stats.wilson(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (1, 9, 0.021484375),  # 2 * (1 + 10) / 2**10, R: binom.test(1, 10)$p.value
        (9, 1, 0.021484375),  # two-sided: the direction does not matter
        (0, 5, 0.0625),  # 2 / 2**5
        (6, 15, 0.0784),  # binom.test(6, 21)
        (3, 3, 1.0),
        (0, 0, 1.0),  # no discordant pair: nothing to tell them apart
    ],
)
def test_mcnemar_exact_p_values(b, c, p):
    assert stats.mcnemar_exact(b, c) == pytest.approx(p, abs=1e-4)


def test_mcnemar_exact_holds_for_many_items():
    assert stats.mcnemar_exact(2000, 2100) == pytest.approx(0.1211, abs=2e-3)  # normal approx.


def test_a_bootstrap_of_identical_columns_finds_no_difference():
    scores = np.random.default_rng(1).random(200)
    boot = stats.paired_bootstrap(scores, scores.copy())
    assert (boot.difference, boot.p, boot.n) == (0.0, 1.0, 200)


def test_a_bootstrap_finds_a_clear_difference_and_says_the_same_every_time():
    rng = np.random.default_rng(2)
    a = rng.random(100)
    b = a + 0.2 + rng.normal(0, 0.05, 100)
    first, again = stats.paired_bootstrap(a, b), stats.paired_bootstrap(a, b)
    assert first == again  # seeded: the page is stable across reruns
    assert first.p < 0.001 and first.low > 0.15 and first.difference == pytest.approx(0.2, abs=0.02)


def test_a_bootstrap_pairs_only_items_both_have():
    a = np.array([1.0, 0.0, np.nan, 1.0])
    b = np.array([1.0, np.nan, 0.5, 1.0])
    assert stats.paired_bootstrap(a, b).n == 2


def test_p_values_read_as_printed():
    assert stats.p_text(0.0123) == "p = 0.012"
    assert stats.p_text(0.0004) == "p < 0.001"
