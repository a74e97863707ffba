"""How many runs a trial needs: run until the mean is known to a target precision, not a fixed count.

On a busy machine ten runs can spread 144% (CV) and a fixed count still prints a figure with no
mark. With `runs="auto"` a trial runs at least `min_runs`, then until the 95% confidence
interval of the mean runtime is within `target_ci` of the mean (half-width / mean), or it has
run `max_runs`; a trial that stops at `max_runs` without the target says so (`target_met`
False) and interference.verdict calls it `noisy`. A fixed `runs=N` runs exactly N and pursues
no target (`target_met` None).

Warmup may end as soon as the runs settle: the first carries compile time, the next few caches
and clocks; once a run is within `tolerance` of the one before, more warmup buys nothing.

    policy = RunPolicy("auto", min_runs=3, max_runs=20, target_ci=0.02)
    warmup_s = warm_until_settled(one_run, max_warmup=5)
    runs = run_until_sure(one_run, policy)      # Runs(runtimes, runs, rel_ci, target_met)

Stdlib only: the Student t quantile is a table for df 1..30 and the Cornish-Fisher expansion
beyond (A&S 26.7.5; within 1e-7 of the exact quantile from df 31 on, 1.959964 in the limit).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Literal

AUTO = "auto"
Z_975 = 1.959963984540054

T_975 = (  # two-sided 95%: t quantile 0.975 by degrees of freedom 1..30
    12.706205,
    4.302653,
    3.182446,
    2.776445,
    2.570582,
    2.446912,
    2.364624,
    2.306004,
    2.262157,
    2.228139,
    2.200985,
    2.178813,
    2.160369,
    2.144787,
    2.131450,
    2.119905,
    2.109816,
    2.100922,
    2.093024,
    2.085963,
    2.079614,
    2.073873,
    2.068658,
    2.063899,
    2.059539,
    2.055529,
    2.051831,
    2.048407,
    2.045230,
    2.042272,
)


def t_quantile_975(df: int) -> float:
    """The Student t quantile for a two-sided 95% interval with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(T_975):
        return T_975[df - 1]
    z, n = Z_975, float(df)
    return (
        z
        + (z**3 + z) / (4 * n)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * n**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * n**4)
    )


def relative_ci(runtimes: list[float]) -> float | None:
    """Half-width of the mean's 95% CI over the mean; None below two runs (no spread to judge)."""
    if len(runtimes) < 2:
        return None
    mean = statistics.fmean(runtimes)
    if mean <= 0:
        return math.inf
    half = t_quantile_975(len(runtimes) - 1) * statistics.stdev(runtimes) / math.sqrt(len(runtimes))
    return half / mean


@dataclass(frozen=True)
class RunPolicy:
    """`runs`: a fixed count, or "auto" for min_runs..max_runs until the relative CI <= target_ci."""

    runs: int | Literal["auto"] = AUTO
    min_runs: int = 3
    max_runs: int = 20
    target_ci: float = 0.02

    def __post_init__(self):
        if self.runs != AUTO and (isinstance(self.runs, bool) or not isinstance(self.runs, int) or self.runs < 1):
            raise ValueError(f"runs must be a count >= 1 or {AUTO!r}, got {self.runs!r}")
        if not 1 <= self.min_runs <= self.max_runs:
            raise ValueError(f"need 1 <= min_runs <= max_runs, got {self.min_runs}..{self.max_runs}")
        if not self.target_ci > 0:
            raise ValueError(f"target_ci must be > 0, got {self.target_ci}")

    @property
    def auto(self) -> bool:
        return self.runs == AUTO


@dataclass(frozen=True)
class Runs:
    runtimes: list[float]  # seconds of every timed run, in order
    runs: int
    rel_ci: float | None  # 95% CI half-width / mean; None for a single run
    target_met: bool | None  # None: a fixed count pursues no target


def run_until_sure(
    run: Callable[[], float], policy: RunPolicy, give_up: Callable[[list[float]], bool] | None = None
) -> Runs:
    """Call `run` (one timed run, returns seconds) as often as `policy` says. With runs=auto, `give_up`
    (asked after each run from min_runs on, with the runtimes so far) may end the runs before the target:
    more runs cannot make the mean sure (the machine is interfering) or there is no time left for one."""
    runtimes: list[float] = []
    if not policy.auto:
        runtimes = [run() for _ in range(policy.runs)]
        return Runs(runtimes, len(runtimes), relative_ci(runtimes), None)
    while len(runtimes) < policy.max_runs:
        runtimes.append(run())
        rel = relative_ci(runtimes)
        if len(runtimes) >= policy.min_runs and rel is not None and rel <= policy.target_ci:
            return Runs(runtimes, len(runtimes), rel, True)
        if len(runtimes) >= policy.min_runs and give_up is not None and give_up(runtimes):
            break
    return Runs(runtimes, len(runtimes), relative_ci(runtimes), False)


def warm_until_settled(
    run: Callable[[], float], max_warmup: int, min_warmup: int = 1, tolerance: float = 0.1
) -> list[float]:
    """Warmup runs' seconds (the first carries compile time): stop once a run is within `tolerance`
    (relative) of the one before and at least `min_warmup` ran, or after `max_warmup`."""
    warmup: list[float] = []
    while len(warmup) < max_warmup:
        warmup.append(run())
        if len(warmup) >= max(2, min_warmup) and abs(warmup[-1] - warmup[-2]) <= tolerance * warmup[-2]:
            break
    return warmup
