"""A trial's expected seconds on a worker, with a range and the evidence it rests on.

total = runs x (warmup + timed + the instrumented run + the profiled run's cost) + compile + build
        + harness
A worker's own start-up is not in it: the first trial on each worker pays it once (CostModel.cold_start,
added by sweeps/pricing/price.py), whichever key that is.
The basis says how much to trust it: `history` (this very trial, or its spec, ran before),
`fit` (its family's fitted law, extrapolated in batch/prompt/steps if need be) or `prior`
(first principles, rescaled by the nearest runs when the history has any).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import pandas as pd

from sweeps.pricing.estimate.hardware import CpuSpeed
from sweeps.pricing.estimate.history import OUTSIDE_CHILD_S
from sweeps.pricing.estimate.laws import Span
from sweeps.pricing.estimate.model import CostModel, spread
from sweeps.pricing.estimate.trials import INSTRUMENTED_RUNS, number, profile_runs, text

HISTORY, FIT, PRIOR = "history", "fit", "prior"
SINGLE_TOTAL_FACTOR = 1.1  # one past total of this very trial: x/1.1 .. x1.1


@dataclass(frozen=True)
class Estimate:
    seconds: float  # expected wall seconds the trial holds a worker
    low: float
    high: float
    basis: str  # history | fit | prior
    parts: dict = field(default_factory=dict)  # runs, compile, build, harness: each part's seconds

    @classmethod
    def of(cls, total: Span, basis: str, parts: dict | None = None) -> "Estimate":
        return cls(total.mid, total.low, total.high, basis, parts or {})


def _total(trial: Mapping, model: CostModel, run: Span, compile_: Span, build: Span, basis: str) -> Estimate:
    profiled = profile_runs(trial) if text(trial, "profile") != "off" else 0.0
    count = model.timed_runs(trial) + Span.exact(number(trial, "warmup") + INSTRUMENTED_RUNS + profiled)
    runs, harness = run.times_span(count), model.harness(trial)
    parts = {"run": run.mid, "runs": runs.mid, "compile": compile_.mid, "build": build.mid, "harness": harness.mid}
    return Estimate.of(runs + compile_ + build + harness, basis, parts)


def _from_history(trial: Mapping, model: CostModel) -> Estimate | None:
    """This trial's measured total, or its spec's measured parts with this trial's run counts."""
    if model.frame.empty:
        return None
    same, exact = model.identical(trial)
    if not len(same):  # exact is a part of same
        return None
    # what it held a warm worker: the process without the worker's start, and the Ray task around it
    total = (
        (exact["warm_child_s"] + exact["in_task_s"].fillna(OUTSIDE_CHILD_S)).dropna()
        if len(exact)
        else pd.Series(dtype=float)
    )
    if len(total):
        span = (
            Span.factor(float(total.iloc[0]), SINGLE_TOTAL_FACTOR)
            if len(total) == 1
            else Span(float(total.median()), float(total.min()), float(total.max()))
        )
        return Estimate.of(span, HISTORY, {"measured": span.mid})
    runs = same["steady_run_s"].dropna() if len(same) else pd.Series(dtype=float)
    if not len(runs):
        return None
    compiled, built = same["compile_s"].dropna(), same["build_s"].dropna()
    return _total(
        trial,
        model,
        spread(runs),
        spread(compiled) if len(compiled) else model.compile(trial),
        spread(built) if len(built) else model.build(trial),
        HISTORY,
    )


def fit(history: pd.DataFrame | None, cpu: CpuSpeed | None = None) -> CostModel:
    """Fit once, estimate many: the laws, ratios and medians every estimate reads."""
    return CostModel.fit(history, cpu)


def estimate(trial: Mapping, history: pd.DataFrame | CostModel | None = None, cpu: CpuSpeed | None = None) -> Estimate:
    """Seconds a trial (a dict of spec fields) will hold a worker, from `history` (the flat runs frame,
    or a CostModel fitted from it) where it can, else from the prior. `cpu` overrides this host's
    calibration (which otherwise runs once, about a second, when a CPU trial needs the prior)."""
    model = history if isinstance(history, CostModel) else CostModel.fit(history, cpu)
    if cpu is not None and model.cpu is None:
        model.cpu = cpu
    measured = _from_history(trial, model)
    if measured is not None:
        return measured
    run, basis = model.run(trial)
    return _total(trial, model, run, model.compile(trial), model.build(trial), basis)


def prior(trial: Mapping, cpu: CpuSpeed | None = None) -> Estimate:
    """First principles alone (no history): basis `prior`, range about x/3..x3."""
    return estimate(trial, None, cpu)
