"""How sure is a speedup? A 95% interval for a ratio of mean runtimes, from the timed runs' figures.

A speedup is mean_base / mean_trial. On the log scale its standard error is, by the delta method,
se^2 = s_b^2 / (n_b m_b^2) + s_t^2 / (n_t m_t^2) (each term the squared relative standard error
of one mean), with Welch-Satterthwaite degrees of freedom, so a few runs give a wide Student-t
interval rather than a falsely narrow normal one. It needs only each trial's mean, standard
deviation and number of runs, which every record carries, so a report of thousands of trials
reads no per-run series. A speedup whose interval holds 1.0 is marked not significant, as
pyperf marks a difference.
"""

from __future__ import annotations

import math

from scipy.special import stdtrit  # Student t's quantile: stats.t.ppf's own, without its checks per call

LEVEL = 0.95


def relative_variance(mean: float, std: float, runs: int) -> float:
    """Squared relative standard error of a mean: (s / m)^2 / n."""
    return (std / mean) ** 2 / runs


def ratio_interval(
    base_mean: float, base_std: float, base_runs: int, mean: float, std: float, runs: int, level: float = LEVEL
) -> tuple[float, float]:
    """(low, high) for base_mean / mean; NaNs where either side has fewer than two runs."""
    if min(base_runs, runs) < 2 or not (base_mean > 0 and mean > 0):
        return math.nan, math.nan
    a, b = relative_variance(base_mean, base_std, base_runs), relative_variance(mean, std, runs)
    ratio = base_mean / mean
    if a + b == 0:
        return ratio, ratio
    dof = (a + b) ** 2 / (a**2 / (base_runs - 1) + b**2 / (runs - 1))
    half = stdtrit(dof, 0.5 + level / 2) * math.sqrt(a + b)
    return ratio * math.exp(-half), ratio * math.exp(half)


def significant(low: float, high: float) -> bool | None:
    """Whether the interval excludes 1.0 (None without an interval)."""
    if math.isnan(low) or math.isnan(high):
        return None
    return not (low <= 1.0 <= high)


def mean_interval(mean: float, std: float, runs: int, level: float = LEVEL) -> tuple[float, float]:
    """(low, high) of a mean runtime's interval, Student t with runs - 1 degrees of freedom; NaNs below
    two runs (the plots' error bars)."""
    if not runs or runs < 2 or not mean > 0 or math.isnan(std):
        return math.nan, math.nan
    half = stdtrit(runs - 1, 0.5 + level / 2) * std / math.sqrt(runs)
    return mean - half, mean + half
