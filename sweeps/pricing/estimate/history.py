"""History: the store's finished rows (tracking/store/runs.py) measured ok (a noisy or contended run's times describe
its neighbours too), with the per-run quantities the fits read:
  steady_run_s  one run without compile (with warmup=0 the mean holds the first run: it is taken out)
  compile_s     first_run_s - steady_run_s: compile, or the device's start-up with compile=off
  build_s       trial_wall_s less every run: model build and whatever else the trial process does
  cold_start_s  the worker's start-up (its warm parent importing torch), carried by the trial it ran first: the
                worker's seconds, not the key's, priced once per worker
  in_child_s    child_wall_s - trial_wall_s - cold_start_s: the trial process's start-up from a warm worker
  warm_child_s  child_wall_s - cold_start_s: the trial process on a warm worker
  in_task_s     node span (node_finished_at - node_started_at) - child_wall_s: the Ray task around it
"""

from __future__ import annotations

from typing import Hashable, Mapping

import numpy as np
import pandas as pd

from sweeps.pricing.estimate.hardware import gpu_kind
from sweeps.pricing.estimate.trials import (
    AUTO,
    DEFAULTS,
    INSTRUMENTED_RUNS,
    PROFILE_SLOWDOWN,
    family,
    is_auto,
    law,
    missing,
    text,
)
from tokengen.contract.declarations import EAGER, KNOBS, in_family
from tokengen.contract.names import WARM

REQUIRED = ("model", "device", "dtype", "batch_size", "max_seqlen", "steps", "runtime_mean_s")
METRICS = ("steps", "runtime_mean_s", "runtime_median_s", "first_run_s", "trial_wall_s", "child_wall_s")
TRUSTED_MEASUREMENT = {"ok"}  # the `measurement` tag; a run recorded before the tag existed counts as ok
RUN_COUNT_COLUMNS = ("runs_done", "timed_runs", "runs_timed")  # runs=auto: how many ran
KEY_COLUMNS = ("trial_key", "key")
MEASUREMENT_FIELDS = ("warmup", "runs", "profile")  # change the total, not a run's time
IDENTITY_IGNORED = {
    *KEY_COLUMNS,
    *MEASUREMENT_FIELDS,
    *"variant min_runs max_runs profile_steps accelerator_type".split(),
}
COLD_START_MIN_S = 0.5  # a first trial's start-up beyond its warm neighbours' below this is noise
OUTSIDE_CHILD_S = 0.01  # in_task_s where a run has no node span (about 1 ms measured; the driver's writes overlap)


def device_kind(row: Mapping) -> str:
    """'cpu', a GPU table key (H100, L40S, ...) or 'cuda' when a run says nothing of its GPU."""
    if text(row, "device") != "cuda":
        return "cpu"
    kinds = (gpu_kind(row.get(column)) for column in ("accelerator_type", "env_gpu_name", "gpu_type"))
    return next((kind for kind in kinds if kind), "cuda")


def _number(frame: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(frame[column], errors="coerce") if column in frame else pd.Series(np.nan, index=frame.index)


def _timed_runs_done(frame: pd.DataFrame) -> pd.Series:
    """Timed runs a row made: its runs param, or for runs=auto a count column or its runtime series."""
    done = pd.to_numeric(frame["runs"], errors="coerce")
    for column in RUN_COUNT_COLUMNS:
        if column in frame:
            done = done.fillna(pd.to_numeric(frame[column], errors="coerce"))
    if "runtime_s" in frame:
        done = done.fillna(frame["runtime_s"].map(lambda v: float(len(v)) if isinstance(v, (list, tuple)) else np.nan))
    return done


def cold_starts(frame: pd.DataFrame, in_child: pd.Series) -> pd.Series:
    """Seconds of a worker's start-up each row carries. A row its worker ran first (it started before any other
    trial of its sweep on its node finished; every row without spans) carries its `in_child` beyond the median of
    the rows of its device kind that were not first; the others 0."""
    started, finished = _number(frame, "node_started_at"), _number(frame, "node_finished_at")
    groups = [frame[c].astype(str) for c in ("sweep", "node_id") if c in frame]
    earliest_end = finished.groupby(groups).transform("min") if groups else pd.Series(finished.min(), frame.index)
    first = ~(started >= earliest_end)  # NaN spans compare False: such a row may be a first
    kinds = frame["device_kind"]
    warm = kinds.map(in_child[~first].groupby(kinds[~first]).median()).fillna(0.0)
    excess = (in_child - warm).where(first, 0.0)
    return excess.where(excess > COLD_START_MIN_S, 0.0).fillna(0.0)


def prepare(history: pd.DataFrame | None) -> pd.DataFrame:
    """Trusted rows with defaults filled and the derived columns added; empty if nothing is usable."""
    if history is None or len(history) == 0 or any(c not in history for c in REQUIRED):
        return pd.DataFrame()
    keep = pd.Series(True, index=history.index)
    if "status" in history:
        keep &= history["status"].astype(str).str.lower().isin({"finished", "nan", "none"})
    if "measurement" in history:
        keep &= history["measurement"].isna() | history["measurement"].astype(str).str.lower().isin(TRUSTED_MEASUREMENT)
    frame = history[keep].copy()
    for name, default in DEFAULTS.items():
        if name not in frame:
            frame[name] = default
        elif name in KNOBS:  # runs recorded before a knob existed ran at its plain value
            frame[name] = frame[name].where(frame[name].notna(), default)
    for name in METRICS:
        frame[name] = _number(frame, name)
    records = frame.to_dict("records")
    frame["device_kind"] = [device_kind(r) for r in records]
    frame["family"] = [family(r, k) for r, k in zip(records, frame["device_kind"])]
    frame["law"] = [law(r) for r in records]
    frame["runs"] = [AUTO if is_auto(r) else r for r in frame["runs"]]  # one spelling for the rows' filters
    runs = _timed_runs_done(frame)
    warmup = pd.to_numeric(frame["warmup"], errors="coerce").fillna(DEFAULTS["warmup"])
    if "warmup_done" in frame:  # runs=auto warms on until a run settles
        warmup = pd.to_numeric(frame["warmup_done"], errors="coerce").fillna(warmup)
    mean, first = frame["runtime_mean_s"], frame["first_run_s"]
    without_first = (runs * mean - first) / (runs - 1)  # warmup=0: the first run is among the timed ones
    steady = mean.where(~((warmup == 0) & first.notna()), without_first.where(runs > 1))
    steady = steady.where(steady.notna() | ~frame["compile"].isin(in_family("compile", EAGER)), mean)  # first ~ plain
    frame["timed_runs_done"] = runs
    frame["steady_run_s"] = steady.where(steady > 0)
    frame["compile_s"] = (first - frame["steady_run_s"]).clip(lower=0)
    cache = frame["compile_cache"] if "compile_cache" in frame else pd.Series(None, index=frame.index, dtype=object)
    frame["compile_warm"] = (cache.astype(str) == WARM).map({True: "yes", False: "no"})  # graphs from a cache
    others = warmup + runs + INSTRUMENTED_RUNS - 1 + frame["profile"].map(lambda p: PROFILE_SLOWDOWN.get(str(p), 2.0))
    frame["build_s"] = (frame["trial_wall_s"] - first - others * frame["steady_run_s"]).clip(lower=0)
    in_child = (frame["child_wall_s"] - frame["trial_wall_s"]).clip(lower=0)
    frame["cold_start_s"] = cold_starts(frame, in_child)
    frame["in_child_s"] = in_child - frame["cold_start_s"]
    frame["warm_child_s"] = frame["child_wall_s"] - frame["cold_start_s"]
    span = _number(frame, "node_finished_at") - _number(frame, "node_started_at")
    frame["in_task_s"] = (span - frame["child_wall_s"]).clip(lower=0)
    return frame.reset_index(drop=True)


def _normal(value) -> Hashable:
    """A value as rows are matched on it: missing, a number, or text (a bool is the number it converts to)."""
    if missing(value):
        return None
    try:
        return ("n", float(value))
    except (TypeError, ValueError):
        return ("s", str(value))


def _asked(trial: Mapping, frame: pd.DataFrame) -> dict | None:
    """What a row must hold (field -> normal value, the pinned GPU as its device_kind); None where the trial gives
    a field the history lacks at other than its default."""
    asked = {}
    for name, value in trial.items():
        if name in IDENTITY_IGNORED:
            continue
        if name in frame:
            asked[name] = _normal(value)
        elif name not in DEFAULTS or _normal(value) != _normal(DEFAULTS[name]):
            return None
    pinned = gpu_kind(trial.get("accelerator_type")) if text(trial, "device") == "cuda" else None
    return {**asked, "device_kind": _normal(pinned)} if pinned else asked


def _with_exact(trial: Mapping, rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    exact = pd.Series(True, index=rows.index)
    for name in (n for n in MEASUREMENT_FIELDS if n in trial):
        exact &= rows[name].map(lambda v, want=_normal(trial[name]): _normal(v) == want)
    return rows, rows[exact]


def _positions(values) -> dict:
    found: dict = {}
    for position, value in enumerate(values):
        found.setdefault(value, []).append(position)
    return found


class IdentityIndex:
    """The history's rows of a trial's spec, and of those the ones with its measurement settings too: a trial key
    the history holds decides alone, else every field the trial gives. Grouped once per set of fields asked (a
    sweep's trials all ask the same), each trial is a dictionary look-up."""

    def __init__(self, frame: pd.DataFrame):
        self.frame, self.empty, self._groups = frame, frame.iloc[0:0], {}
        self._keys = [_positions(frame[column].astype(str)) for column in KEY_COLUMNS if column in frame]

    def __call__(self, trial: Mapping) -> tuple[pd.DataFrame, pd.DataFrame]:
        key = str(trial.get("key") or trial.get("trial_key") or "")
        positions = next((keys[key] for keys in self._keys if key and key in keys), None)
        if positions:
            return self.frame.iloc[positions], self.frame.iloc[positions]
        asked = None if self.frame.empty else _asked(trial, self.frame)
        if asked is None:
            return self.empty, self.empty
        if tuple(asked) not in self._groups:
            self._groups[tuple(asked)] = _positions(zip(*(self.frame[name].map(_normal) for name in asked)))
        positions = self._groups[tuple(asked)].get(tuple(asked.values()))
        return _with_exact(trial, self.frame.iloc[positions]) if positions else (self.empty, self.empty)
