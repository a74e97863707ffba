"""A trial's expected seconds on a worker, with a range and the evidence it rests on:
  runs x (warmup + timed + the instrumented run + the profiled run's cost) + compile + build + harness
A worker's own start-up is not in it: the first trial on each worker pays it (CostModel.cold_start, added by
sweeps/pricing/price.py). The basis: `history` (this trial, or its spec, ran before), `fit` (its family's law,
extrapolated if need be) or `prior` (first principles, rescaled by the nearest runs when the history has any).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import pandas as pd

from sweeps.pricing.estimate.hardware import CpuSpeed
from sweeps.pricing.estimate.history import OUTSIDE_CHILD_S
from sweeps.pricing.estimate.laws import Span
from sweeps.pricing.estimate.model import CostModel, spread
from sweeps.pricing.estimate.trials import INSTRUMENTED_RUNS, number, profile_runs

HISTORY, FIT, PRIOR = "history", "fit", "prior"
SINGLE_TOTAL_FACTOR = 1.1  # one past total of this very trial: x/1.1 .. x1.1


@dataclass(frozen=True)
class Estimate:
    seconds: float  # expected wall seconds the trial holds a worker
    low: float
    high: float
    basis: str  # history | fit | prior
    parts: dict = field(default_factory=dict)  # seconds of one run (run), all runs, compile, build, harness


def _run_count(trial: Mapping, model: CostModel) -> Span:
    return model.timed_runs(trial) + Span.exact(number(trial, "warmup") + INSTRUMENTED_RUNS + profile_runs(trial))


def _total(trial: Mapping, model: CostModel, run: Span, compile_: Span, build: Span, basis: str) -> Estimate:
    runs, harness = run.times_span(_run_count(trial, model)), model.harness(trial)
    total = runs + compile_ + build + harness
    parts = {"run": run.mid, "runs": runs.mid, "compile": compile_.mid, "build": build.mid, "harness": harness.mid}
    return Estimate(total.mid, total.low, total.high, basis, parts)


def _median(values: pd.Series, default: float) -> float:
    values = values.dropna()
    return float(values.median()) if len(values) else default


def _from_history(trial: Mapping, model: CostModel) -> Estimate | None:
    """This trial's measured total (what it held a warm worker: the process less the worker's start, and the Ray
    task around it), split by its own runs' columns; else its spec's measured parts with this trial's run counts."""
    if model.frame.empty:
        return None
    same, exact = model.identical(trial)  # exact is a part of same
    total = (exact["warm_child_s"] + exact["in_task_s"].fillna(OUTSIDE_CHILD_S)).dropna()
    if len(total):
        one = len(total) == 1
        span = (
            Span.factor(float(total.iloc[0]), SINGLE_TOTAL_FACTOR)
            if one
            else Span(*total.agg(["median", "min", "max"]))
        )
        compile_, build = _median(exact["compile_s"], 0.0), _median(exact["build_s"], 0.0)
        inside, count = _median(exact["trial_wall_s"], span.mid), _run_count(trial, model).mid
        run = max(inside - compile_ - build, 0.0) / max(count, 1.0)
        parts = {"run": run, "runs": run * count, "compile": compile_, "build": build, "harness": span.mid - inside}
        return Estimate(span.mid, span.low, span.high, HISTORY, parts)
    runs = same["steady_run_s"].dropna()
    if not len(runs):
        return None
    compiled, built = same["compile_s"].dropna(), same["build_s"].dropna()
    compile_ = spread(compiled) if len(compiled) else model.compile(trial)
    return _total(trial, model, spread(runs), compile_, spread(built) if len(built) else model.build(trial), HISTORY)


def fit(history: pd.DataFrame | None, cpu: CpuSpeed | None = None) -> CostModel:
    """Fit once, estimate many: the laws, ratios and medians every estimate reads."""
    return CostModel.fit(history, cpu)


def estimate(trial: Mapping, history: pd.DataFrame | CostModel | None = None, cpu: CpuSpeed | None = None) -> Estimate:
    """Seconds a trial (a dict of spec fields) will hold a worker, from `history` (the flat runs frame, or a
    CostModel fitted from it) where it can, else from the prior. `cpu` overrides this host's calibration (which
    otherwise runs once, about a second, when a CPU trial needs the prior)."""
    model = history if isinstance(history, CostModel) else CostModel.fit(history, cpu)
    if cpu is not None and model.cpu is None:
        model.cpu = cpu
    measured = _from_history(trial, model)
    if measured is not None:
        return measured
    run, basis = model.run(trial)
    return _total(trial, model, run, model.compile(trial), model.build(trial), basis)
