"""A trial's expected seconds on a worker, runs x (warmup + timed + instrumented + profiled) + compile + build +
harness, with a range and its basis: `history` (this very trial ran before), `fit` (its family's law) or `prior`
(first principles, rescaled by the nearest runs). A worker's start-up is priced apart (sweeps/pricing/price.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

from sweeps.pricing.estimate.model import CostModel
from sweeps.pricing.estimate.observed import OUTSIDE_CHILD_S
from sweeps.pricing.estimate.span import Span
from sweeps.pricing.estimate.trials import INSTRUMENTED_RUNS, arrival_span_s, number, profile_runs

HISTORY, FIT, PRIOR = "history", "fit", "prior"
SINGLE_TOTAL = 1.1  # one past total of this very trial: x/1.1 .. x1.1


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


def _from_history(trial: Mapping, model: CostModel) -> Estimate | None:
    """This very trial's measured total (what it held a warm worker: the process less the worker's start, and the
    Ray task around it), split by its own runs' columns."""
    exact = model.measured(trial)
    total = (exact["warm_child_s"] + exact["in_task_s"].fillna(OUTSIDE_CHILD_S)).dropna() if len(exact) else exact
    if not len(total):
        return None
    span = Span(*total.agg(["median", "min", "max"])) if len(total) > 1 else Span.factor(total.iloc[0], SINGLE_TOTAL)
    compile_, build = (float(np.nan_to_num(exact[column].median())) for column in ("compile_s", "build_s"))
    inside, count = exact["trial_wall_s"].median(), _run_count(trial, model).mid
    inside = span.mid if pd.isna(inside) else float(inside)
    run = max(inside - compile_ - build, 0.0) / max(count, 1.0)
    parts = {"run": run, "runs": run * count, "compile": compile_, "build": build, "harness": span.mid - inside}
    return Estimate(span.mid, span.low, span.high, HISTORY, parts)


def estimate(trial: Mapping, model: CostModel) -> Estimate:
    """Seconds a trial (a dict of spec fields) will hold a worker: its own measured total where the history has one,
    else its parts from the model's nearest evidence."""
    measured = _from_history(trial, model)
    if measured is not None:
        return measured
    run, basis = model.run(trial)
    span = arrival_span_s(trial)  # a load trial's run lasts at least its arrivals' span
    run = Span(max(run.mid, span), max(run.low, span), max(run.high, span))
    return _total(trial, model, run, model.compile(trial), model.build(trial), basis)


fit = CostModel.fit  # fit once (the laws, ratios and medians), estimate many
