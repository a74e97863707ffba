"""The speedup interval's arithmetic on inputs whose answer is known by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracking.report.figures.intervals import ratio_interval, relative_variance, significant


def test_relative_variance_is_the_squared_relative_standard_error():
    assert relative_variance(2.0, 0.2, 4) == pytest.approx((0.1**2) / 4)


def test_equal_runs_give_the_textbook_student_t_interval():
    # both sides: mean 1.0 / 0.5, cv 10%, 5 runs -> a = b = 0.002, se = sqrt(0.004),
    # dof = (0.004)^2 / (2 * 0.002^2 / 4) = 8, t(0.975, 8) = 2.306004
    low, high = ratio_interval(1.0, 0.1, 5, 0.5, 0.05, 5)
    half = 2.306004 * math.sqrt(0.004)
    assert (low, high) == (pytest.approx(2 * math.exp(-half), rel=1e-5), pytest.approx(2 * math.exp(half), rel=1e-5))
    assert significant(low, high) is True


def test_noisy_runs_make_a_small_speedup_not_significant():
    low, high = ratio_interval(1.0, 0.2, 3, 0.95, 0.2, 3)
    assert low < 1.0 < high and significant(low, high) is False


def test_one_run_has_no_interval_and_exact_runs_a_point():
    assert all(math.isnan(v) for v in ratio_interval(1.0, 0.0, 1, 0.5, 0.0, 10))
    assert significant(math.nan, math.nan) is None
    assert ratio_interval(1.0, 0.0, 3, 0.5, 0.0, 3) == (2.0, 2.0)


def test_coverage_on_simulated_runs_is_close_to_95_percent():
    """Draw runs from known normal distributions: the interval holds the true ratio ~95% of the time."""
    rng = np.random.default_rng(0)
    hits, trials = 0, 2000
    for _ in range(trials):
        base, mine = rng.normal(1.0, 0.05, 6), rng.normal(0.5, 0.04, 6)
        low, high = ratio_interval(base.mean(), base.std(ddof=1), 6, mine.mean(), mine.std(ddof=1), 6)
        hits += low <= 2.0 <= high
    assert 0.93 <= hits / trials <= 0.97
