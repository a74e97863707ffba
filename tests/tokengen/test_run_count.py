"""Run counts: auto runs stop once the mean is sure or at max_runs, fixed runs run exactly N, warmup
stops once settled, and the t quantile matches the exact one. Scripted runtimes keep it deterministic.

The modules are loaded from their files: they are stdlib-only by design, and tokengen/measure is being
restructured; once its __init__ lands, `from tokengen.measure import run_count` is the same module.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import statistics
import sys
from pathlib import Path

import pytest


def _load(name: str):
    path = Path(__file__).resolve().parents[2] / "tokengen" / "measure" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_measure_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


rc = _load("run_count")
interference = _load("interference")

QUIET_CPU = {
    "interference_device": "cpu",
    "interference_threads": 1,
    "interference_cores": 2,
    "interference_cpu_util": 0.99,
    "interference_others_cores": 0.05,
    "interference_load": 1.0,
}


class Scripted:
    """A run that returns the next scripted runtime and counts its calls."""

    def __init__(self, runtimes):
        self.runtimes, self.calls = iter(runtimes), 0

    def __call__(self) -> float:
        self.calls += 1
        return next(self.runtimes)


def test_a_series_that_settles_stops_early_with_the_ci_met():
    run = Scripted([1.0, 1.01, 0.99, 1.0] + [5.0] * 20)
    runs = rc.run_until_sure(run, rc.RunPolicy("auto", min_runs=3, max_runs=20, target_ci=0.02))
    assert runs.runtimes == [1.0, 1.01, 0.99, 1.0]  # 3 runs: CI 2.5% of the mean; the 4th brings it to 1.3%
    assert runs.runs == run.calls == 4
    assert runs.target_met is True
    assert runs.rel_ci == pytest.approx(rc.t_quantile_975(3) * 0.0081650 / 2, rel=1e-4)


def test_auto_runs_at_least_min_runs_even_when_two_agree():
    run = Scripted(itertools.repeat(1.0))
    runs = rc.run_until_sure(run, rc.RunPolicy("auto", min_runs=5, max_runs=20))
    assert (runs.runs, run.calls, runs.rel_ci, runs.target_met) == (5, 5, 0.0, True)


def test_a_series_that_never_settles_stops_at_max_runs_and_is_noisy():
    run = Scripted(itertools.cycle([1.0, 2.0]))
    runs = rc.run_until_sure(run, rc.RunPolicy("auto", min_runs=3, max_runs=20, target_ci=0.02))
    assert runs.runs == run.calls == 20
    assert runs.target_met is False
    assert runs.rel_ci > 0.1
    cv = statistics.stdev(runs.runtimes) / statistics.mean(runs.runtimes)
    measurement, reasons = interference.verdict(QUIET_CPU, cv, runs.target_met)
    assert measurement == "noisy"
    assert reasons == ["CI target not met (cv 34.2%)"]


def test_fixed_runs_run_exactly_n_and_pursue_no_target():
    for n, series in ((5, itertools.cycle([1.0, 2.0])), (1, itertools.repeat(1.0)), (7, itertools.repeat(1.0))):
        run = Scripted(series)
        runs = rc.run_until_sure(run, rc.RunPolicy(n, min_runs=3, max_runs=20))
        assert runs.runs == run.calls == len(runs.runtimes) == n
        assert runs.target_met is None
    assert runs.rel_ci == 0.0
    assert rc.run_until_sure(Scripted([1.0]), rc.RunPolicy(1)).rel_ci is None


@pytest.mark.parametrize(
    "bad",
    [
        dict(runs=0),
        dict(runs="many"),
        dict(runs=True),
        dict(runs="auto", min_runs=5, max_runs=4),
        dict(runs="auto", min_runs=0),
        dict(runs="auto", target_ci=0.0),
    ],
)
def test_policy_refuses_what_it_cannot_run(bad):
    with pytest.raises(ValueError):
        rc.RunPolicy(**bad)


def test_relative_ci_of_two_runs():
    assert rc.relative_ci([1.0, 2.0]) == pytest.approx(12.706205 * math.sqrt(0.5) / math.sqrt(2) / 1.5, rel=1e-6)
    assert rc.relative_ci([3.0]) is None


@pytest.mark.parametrize("df,known", [(1, 12.706), (2, 4.303), (5, 2.571), (10, 2.228), (30, 2.042)])
def test_t_quantile_known_values(df, known):
    assert round(rc.t_quantile_975(df), 3) == known


def _t_cdf(t: float, df: int) -> float:
    """Student t CDF for integer df, closed form (Abramowitz & Stegun 26.7.3/26.7.4)."""
    theta = math.atan(t / math.sqrt(df))
    c, s = math.cos(theta), math.sin(theta)
    if df == 1:
        a = 2 * theta / math.pi
    elif df % 2:
        term, total = c, c
        for k in range(3, df - 1, 2):
            term *= c * c * (k - 1) / k
            total += term
        a = 2 / math.pi * (theta + s * total)
    else:
        term, total = 1.0, 1.0
        for k in range(2, df - 1, 2):
            term *= c * c * (k - 1) / k
            total += term
        a = s * total
    return 0.5 + a / 2


@pytest.mark.parametrize("df", [*range(1, 61), 100, 1000])
def test_t_quantile_is_the_exact_0975_point(df):
    assert _t_cdf(rc.t_quantile_975(df), df) == pytest.approx(0.975, abs=1e-7)


def test_t_quantile_tends_to_the_normal_one():
    assert rc.t_quantile_975(10**7) == pytest.approx(1.959964, abs=1e-6)
    with pytest.raises(ValueError):
        rc.t_quantile_975(0)


def test_warmup_stops_once_a_run_is_within_tolerance_of_the_one_before():
    run = Scripted([10.0, 1.5, 1.05, 1.0, 1.0, 1.0])
    assert rc.warm_until_settled(run, max_warmup=6) == [10.0, 1.5, 1.05, 1.0]  # 1.0 is 5% off 1.05
    assert run.calls == 4


def test_warmup_without_compile_stops_after_two():
    assert rc.warm_until_settled(Scripted([1.0, 1.05, 9.0]), max_warmup=5) == [1.0, 1.05]


def test_warmup_honours_min_and_max():
    assert rc.warm_until_settled(Scripted(itertools.repeat(1.0)), max_warmup=5, min_warmup=3) == [1.0] * 3
    assert rc.warm_until_settled(Scripted(itertools.cycle([1.0, 2.0])), max_warmup=4) == [1.0, 2.0, 1.0, 2.0]
    assert rc.warm_until_settled(Scripted([]), max_warmup=0) == []
    assert rc.warm_until_settled(Scripted([1.0, 1.15, 1.0]), max_warmup=3) == [1.0, 1.15, 1.0]
    assert rc.warm_until_settled(Scripted([1.0, 1.15, 1.0]), max_warmup=3, tolerance=0.2) == [1.0, 1.15]


def test_auto_runs_may_give_up_from_min_runs_on():
    asked = []

    def give_up(runtimes):
        asked.append(len(runtimes))
        return len(runtimes) == 4

    run = Scripted(itertools.cycle([1.0, 2.0]))
    runs = rc.run_until_sure(run, rc.RunPolicy("auto", min_runs=3, max_runs=20), give_up=give_up)
    assert (runs.runs, runs.target_met, asked) == (4, False, [3, 4])
    fixed = rc.run_until_sure(Scripted(itertools.repeat(1.0)), rc.RunPolicy(5), give_up=lambda r: True)
    assert fixed.runs == 5  # a fixed count runs its count
