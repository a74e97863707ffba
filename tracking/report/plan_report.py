"""Plan against actual: the estimate a sweep recorded before it started, beside what its trials took.

The driver leaves on the sweep's parent run its plan (plan.csv: each trial's estimated_s, low_s,
high_s, basis and in_trial_s; `action` run or reused) and the totals as metrics (estimated_s,
estimated_wall_s, ...). A trial's actual is what it held its worker: node_finished_at -
node_started_at, the Ray task's span on its node (the trial process, its start-up and, on a
worker's first trial, the warm parent's imports), which is what estimated_s predicts and what
device-hours bill; child_wall_s where a run lacks the span. trial_wall_s, the trial process's own
clock, is set beside in_trial_s (the estimate less the harness around the process): the model of the
trial's work alone. Errors are (estimated - actual) / actual over the finished trials the plan ran
(reused and failed trials are left out: the first did not run, the second stopped early).

The makespan is the sweep's wall on its workers, the first trial's start to the last one's end
(node_started_at / node_finished_at of every trial the plan ran), against the bound no schedule
beats: max(total held / workers, longest trial), workers being the most trials seen running at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tokengen.contract.names import FINISHED, TRIAL_KEY
from tracking.report.markdown import to_markdown
from tracking.store.reading import load_plan

COMPARISON_FILE = "plan_vs_actual.csv"
RUN = "run"
NOTE = (
    "Estimated before the sweep started (the parent run's plan.csv and estimated_* metrics). held_s: what a "
    "trial held its worker, node_finished_at - node_started_at (its Ray task on the node: the trial process "
    "and its start-up; child_wall_s where a run lacks it), the time estimated_s predicts and device-hours "
    "bill. in_trial_s against trial_wall_s: the estimate less the harness around the trial process, against "
    "the process's own clock. error = (estimated - actual) / actual, over the finished trials the plan ran. "
    "The makespan runs from the first trial's start to the last one's end; no schedule beats max(total held "
    "/ workers, longest trial), workers being the most trials seen running at once."
)


@dataclass
class PlanComparison:
    totals: pd.DataFrame  # measure, estimated_s, low_s, high_s, actual_s, actual_over_estimate
    by_basis: pd.DataFrame  # basis, trials, median_error_pct, median_abs_error_pct, in_range_pct
    per_trial: pd.DataFrame  # one row per compared trial
    makespan: dict  # makespan_s, lower_bound_s, workers, planned_wall_s, ...


def held_seconds(frame: pd.DataFrame) -> pd.Series:
    """What each trial held its worker: its node span, else child_wall_s."""
    span = _column(frame, "node_finished_at") - _column(frame, "node_started_at")
    return span.where(span > 0).fillna(_column(frame, "child_wall_s"))


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(frame[name], errors="coerce") if name in frame else pd.Series(np.nan, index=frame.index)


def peak_concurrency(starts, ends) -> int:
    """The most intervals [start, end) open at once."""
    events = sorted([(float(s), 1) for s in starts] + [(float(e), -1) for e in ends])
    running = peak = 0
    for _, step in events:  # an end sorts before a start at the same instant
        running += step
        peak = max(peak, running)
    return peak


def _errors(estimated: pd.Series, actual: pd.Series) -> pd.Series:
    return (estimated - actual) / actual


def _basis_rows(per_trial: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for basis, group in [("all", per_trial), *per_trial.groupby("basis", sort=True)]:
        error = group["error"].dropna()
        inside = group["in_trial_error"].dropna()
        in_range = (group["held_s"] >= group["low_s"]) & (group["held_s"] <= group["high_s"])
        rows.append(
            {
                "basis": basis,
                "trials": len(group),
                "median_error_pct": 100 * error.median() if len(error) else None,
                "median_abs_error_pct": 100 * error.abs().median() if len(error) else None,
                "in_trial_median_abs_error_pct": 100 * inside.abs().median() if len(inside) else None,
                "in_range_pct": 100 * in_range.mean() if len(group) else None,
            }
        )
    return pd.DataFrame(rows)


def compare(plan: pd.DataFrame, trials: pd.DataFrame, metrics: dict | None = None) -> PlanComparison | None:
    """The plan's trials that ran, joined by key with the sweep's runs; None when none can be compared."""
    metrics = metrics or {}
    if plan is None or plan.empty or trials is None or trials.empty or TRIAL_KEY not in trials:
        return None
    ran = plan[plan["action"].astype(str) == RUN]
    own = trials if "reused_from" not in trials else trials[trials["reused_from"].isna()]
    own = own.drop(columns=[c for c in ("variant",) if c in ran and c in own])
    joined = ran.merge(own, left_on="key", right_on=TRIAL_KEY, how="inner", suffixes=("", "_run"))
    if joined.empty:
        return None
    joined["held_s"] = held_seconds(joined)
    finished = joined[joined["status"] == FINISHED].copy()
    finished["error"] = _errors(finished["estimated_s"], finished["held_s"])
    finished["trial_wall_s"] = _column(finished, "trial_wall_s")
    finished["in_trial_error"] = _errors(finished["in_trial_s"], finished["trial_wall_s"])
    per_trial = finished[
        [
            "key",
            "variant",
            "basis",
            "estimated_s",
            "low_s",
            "high_s",
            "held_s",
            "error",
            "in_trial_s",
            "trial_wall_s",
            "in_trial_error",
        ]
    ].reset_index(drop=True)

    starts, ends = _column(joined, "node_started_at"), _column(joined, "node_finished_at")
    timed = starts.notna() & ends.notna()
    makespan = {"trials": int(timed.sum())}
    if timed.any():
        workers = peak_concurrency(starts[timed], ends[timed])
        held = joined.loc[timed, "held_s"]
        makespan.update(
            makespan_s=float(ends[timed].max() - starts[timed].min()),
            workers=workers,
            total_held_s=float(held.sum()),
            longest_s=float(held.max()),
            lower_bound_s=max(float(held.sum()) / max(workers, 1), float(held.max())),
        )
        makespan["over_bound"] = makespan["makespan_s"] / makespan["lower_bound_s"]
    makespan["planned_wall_s"] = metrics.get("estimated_wall_s")
    makespan["planned_lower_bound_s"] = metrics.get("estimated_wall_lower_bound_s")

    def total(measure, estimated, low, high, actual):
        return {
            "measure": measure,
            "estimated_s": estimated,
            "low_s": low,
            "high_s": high,
            "actual_s": actual,
            "actual_over_estimate": actual / estimated if estimated else None,
        }

    rows = [
        total(
            f"held a worker, {len(finished)} finished trial(s)",
            finished["estimated_s"].sum(),
            finished["low_s"].sum(),
            finished["high_s"].sum(),
            finished["held_s"].sum(),
        ),
        total(
            "inside the trial process (trial_wall_s)",
            finished["in_trial_s"].sum(),
            None,
            None,
            finished["trial_wall_s"].sum(),
        ),
    ]
    if "makespan_s" in makespan and makespan["planned_wall_s"] is not None:
        rows.append(
            total(
                f"makespan on {makespan['workers']} worker(s) (plan: LPT)",
                makespan["planned_wall_s"],
                None,
                None,
                makespan["makespan_s"],
            )
        )
    totals = pd.DataFrame(rows)
    totals.attrs["unit"] = {"actual_over_estimate": "x"}
    return PlanComparison(totals, _basis_rows(per_trial), per_trial, makespan)


def render(comparison: PlanComparison, failed: int = 0) -> str:
    span = comparison.makespan
    lines = [
        "## Plan against actual",
        "",
        NOTE,
        "",
        to_markdown(comparison.totals),
        "",
        to_markdown(comparison.by_basis),
        "",
    ]
    if "makespan_s" in span:
        lines += [
            f"Makespan {span['makespan_s']:.1f} s over {span['trials']} trial(s) against a lower bound of "
            f"{span['lower_bound_s']:.1f} s (max({span['total_held_s']:.1f} s / {span['workers']} worker(s), "
            f"longest {span['longest_s']:.1f} s)): {span['over_bound']:.3f}x the bound"
            + (f"; the plan's LPT wall was {span['planned_wall_s']:.1f} s" if span.get("planned_wall_s") else "")
            + ".",
            "",
        ]
    if failed:
        lines += [f"{failed} failed trial(s) of the plan are left out of the errors (they count in the makespan).", ""]
    return "\n".join(lines)


def plan_against_actual(runs, directory: Path) -> tuple[str, list[Path]]:
    """The report's section and plan_vs_actual.csv, from the sweep's runs; ("", []) without a plan."""
    target = Path(directory) / COMPARISON_FILE
    target.unlink(missing_ok=True)
    plan, metrics = load_plan(runs.client, runs.parent_id)
    comparison = compare(plan, runs.trials, metrics)
    if comparison is None:
        return "", []
    comparison.per_trial.to_csv(target, index=False)
    ran = set(plan.loc[plan["action"].astype(str) == RUN, "key"])
    mine = runs.trials[runs.trials[TRIAL_KEY].isin(ran)]
    failed = int((mine["status"] != FINISHED).sum())
    return render(comparison, failed), [target]
