"""History: the finished, trustworthy runs, with the per-run quantities the fits read.

Input is the store's flat rows (tracking/store/runs.py) (params, metrics and tags by their logged names), one row per
finished run. A run the sweep tagged `measurement` noisy or contended is left out: its times describe
the neighbours as much as the trial. Derived columns:
  steady_run_s  one run without compile (with warmup=0 the mean holds the first run: it is taken out)
  compile_s     first_run_s - steady_run_s: compile, or the device's start-up with compile=off
  build_s       trial_wall_s less every run: model build and whatever else the trial process does
  in_child_s    child_wall_s - trial_wall_s - cold_start_s: the trial process's start-up from a warm worker
  cold_start_s  the worker's own start-up, carried by the trial it ran first (0 for the others)
  warm_child_s  child_wall_s - cold_start_s: the trial process on a warm worker
  in_task_s     node span (node_finished_at - node_started_at) - child_wall_s: the Ray task around it

A worker's first trial waits for the worker's warm parent to start (sweeps/execution/trial_process.py: a
forkserver that imports torch and transformers once): seconds that belong to the worker, not to the
key. Left in, they priced the key as if every later sweep ran it first (a 48-step baseline at 15.2 s
against the 7.7 s it then held); the cost model prices a worker's start once per worker instead.
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
RUN_COUNT_COLUMNS = ("runs_done", "timed_runs", "runs_timed")  # runs=auto: how many ran (name not settled yet)
KEY_COLUMNS = ("trial_key", "key")
MEASUREMENT_FIELDS = ("warmup", "runs", "profile")  # change the total, not a run's time
IDENTITY_IGNORED = {
    "variant",
    "key",
    "trial_key",
    "min_runs",
    "max_runs",
    "profile_steps",
    "accelerator_type",
    *MEASUREMENT_FIELDS,
}
COLD_START_MIN_S = 0.5
"""A first trial's start-up beyond its warm neighbours' smaller than this is noise, not a worker's start."""
OUTSIDE_CHILD_S = 0.01
"""A worker's time on a trial outside its trial process (in_task_s: about 1 ms measured), for a run that
recorded no node span. The driver's MLflow writes overlap the next trial and Ray starts before the first:
they make the sweep's wall, not a trial's time on its worker (priced at 1.05 s a trial, they put a
12-trial sweep's estimate 12 s above what its trials held)."""


def device_kind(row: Mapping) -> str:
    """'cpu', a GPU table key (H100, L40S, ...) or 'cuda' when a run says nothing of its GPU."""
    if text(row, "device") != "cuda":
        return "cpu"
    for column in ("accelerator_type", "env_gpu_name", "gpu_type"):
        kind = gpu_kind(row.get(column))
        if kind:
            return kind
    return "cuda"


def _trusted(history: pd.DataFrame) -> pd.DataFrame:
    keep = pd.Series(True, index=history.index)
    if "status" in history:
        keep &= history["status"].astype(str).str.lower().isin({"finished", "nan", "none"})
    if "measurement" in history:
        tag = history["measurement"]
        keep &= tag.isna() | tag.astype(str).str.lower().isin(TRUSTED_MEASUREMENT)
    return history[keep]


def _timed_runs_done(frame: pd.DataFrame) -> pd.Series:
    """Timed runs a row made: its runs param, or for runs=auto a count column or its runtime series."""
    done = pd.to_numeric(frame["runs"], errors="coerce")
    for column in RUN_COUNT_COLUMNS:
        if column in frame:
            done = done.fillna(pd.to_numeric(frame[column], errors="coerce"))
    if "runtime_s" in frame:
        lengths = frame["runtime_s"].map(lambda v: float(len(v)) if isinstance(v, (list, tuple)) else np.nan)
        done = done.fillna(lengths)
    return done


def _number(frame: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(frame[column], errors="coerce") if column in frame else pd.Series(np.nan, index=frame.index)


def cold_starts(frame: pd.DataFrame, in_child: pd.Series) -> pd.Series:
    """Seconds of a worker's start-up each row carries. A row its worker ran first (it started before any
    other trial of its sweep on its node finished; every row where the spans are not recorded) carries its
    start-up (`in_child`) beyond the median of the rows of its device kind that were not first; others 0."""
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
    frame = _trusted(history).copy()
    for name, default in DEFAULTS.items():
        if name not in frame:
            frame[name] = default
        elif name in KNOBS:  # runs recorded before a knob existed ran at its plain value
            frame[name] = frame[name].where(frame[name].notna(), default)
    for name in METRICS:
        frame[name] = pd.to_numeric(frame[name], errors="coerce") if name in frame else np.nan
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
    first_inside = (warmup == 0) & first.notna()
    steady = mean.where(~first_inside, without_first.where(runs > 1))
    steady = steady.where(
        steady.notna() | ~frame["compile"].isin(in_family("compile", EAGER)), mean
    )  # compile off: first run ~ plain
    frame["timed_runs_done"] = runs
    frame["steady_run_s"] = steady.where(steady > 0)
    frame["compile_s"] = (first - frame["steady_run_s"]).clip(lower=0)
    cache = frame["compile_cache"] if "compile_cache" in frame else pd.Series(None, index=frame.index, dtype=object)
    frame["compile_warm"] = (cache.astype(str) == WARM).map({True: "yes", False: "no"})  # its graphs came from a cache
    profiled = frame["profile"].map(lambda p: PROFILE_SLOWDOWN.get(str(p), 2.0))
    others = warmup + runs + INSTRUMENTED_RUNS - 1 + profiled
    frame["build_s"] = (frame["trial_wall_s"] - first - others * frame["steady_run_s"]).clip(lower=0)
    in_child = (frame["child_wall_s"] - frame["trial_wall_s"]).clip(lower=0)
    frame["cold_start_s"] = cold_starts(frame, in_child)
    frame["in_child_s"] = in_child - frame["cold_start_s"]
    frame["warm_child_s"] = frame["child_wall_s"] - frame["cold_start_s"]
    span = _number(frame, "node_finished_at") - _number(frame, "node_started_at")
    frame["in_task_s"] = (span - frame["child_wall_s"]).clip(lower=0)
    return frame.reset_index(drop=True)


def _same(a, b) -> bool:
    if missing(a) or missing(b):
        return missing(a) and missing(b)
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def identical(trial: Mapping, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows of the same spec up to measurement settings, those of these the same in full too).

    A trial key that the history holds decides alone. Otherwise every field the trial gives must
    match; a field the history lacks matches only at its default, and an unknown one never."""
    empty = frame.iloc[0:0]
    if frame.empty:
        return empty, empty
    key = trial.get("key") or trial.get("trial_key")
    for column in KEY_COLUMNS:
        if key and column in frame:
            rows = frame[frame[column].astype(str) == str(key)]
            if len(rows):
                return rows, rows
    keep = pd.Series(True, index=frame.index)
    for name, value in trial.items():
        if name in IDENTITY_IGNORED:
            continue
        if name in frame:
            keep &= frame[name].map(lambda v, value=value: _same(v, value))
        elif not (name in DEFAULTS and _same(value, DEFAULTS[name])):
            return empty, empty
    pinned = gpu_kind(trial.get("accelerator_type")) if text(trial, "device") == "cuda" else None
    if pinned:
        keep &= frame["device_kind"] == pinned
    rows = frame[keep]
    exact = pd.Series(True, index=rows.index)
    for name in MEASUREMENT_FIELDS:
        if name in trial:
            exact &= rows[name].map(lambda v, value=trial[name]: _same(v, value))
    return rows, rows[exact]


def _normal(value) -> Hashable:
    """A value as `_same` compares it: missing, a number, or text (a bool is the number it converts to)."""
    if missing(value):
        return None
    try:
        return ("n", float(value))
    except (TypeError, ValueError):
        return ("s", str(value))


class IdentityIndex:
    """`identical` for many trials against one frame: the frame is grouped once per set of fields the
    trials give (a sweep's trials all give the same), so each trial is a dictionary look-up instead of
    a pass over every row per field. Agrees with `identical` wherever `_same` is an equivalence (values
    compare alike as numbers or as text; not a bool against the text 'True')."""

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame
        self.empty = frame.iloc[0:0]
        self._keys: dict[str, dict] = {}
        self._groups: dict[tuple, dict] = {}
        if frame.empty:
            return
        for column in KEY_COLUMNS:
            if column in frame:
                positions: dict = {}
                for position, key in enumerate(frame[column].astype(str)):
                    positions.setdefault(key, []).append(position)
                self._keys[column] = positions

    def _grouped(self, names: tuple, pinned: bool) -> dict:
        signature = (names, pinned)
        if signature not in self._groups:
            columns = [self.frame[n].map(_normal).tolist() for n in names]
            if pinned:
                columns.append(self.frame["device_kind"].tolist())
            groups: dict = {}
            for position, values in enumerate(zip(*columns)):
                groups.setdefault(values, []).append(position)
            self._groups[signature] = groups
        return self._groups[signature]

    def __call__(self, trial: Mapping) -> tuple[pd.DataFrame, pd.DataFrame]:
        if self.frame.empty:
            return self.empty, self.empty
        key = trial.get("key") or trial.get("trial_key")
        for column in KEY_COLUMNS:
            if key and column in self._keys:
                positions = self._keys[column].get(str(key))
                if positions:
                    rows = self.frame.iloc[positions]
                    return rows, rows
        names, values = [], []
        for name, value in trial.items():
            if name in IDENTITY_IGNORED:
                continue
            if name in self.frame:
                names.append(name)
                values.append(_normal(value))
            elif not (name in DEFAULTS and _same(value, DEFAULTS[name])):
                return self.empty, self.empty
        pinned = gpu_kind(trial.get("accelerator_type")) if text(trial, "device") == "cuda" else None
        if pinned:
            values.append(pinned)
        positions = self._grouped(tuple(names), bool(pinned)).get(tuple(values))
        if not positions:
            return self.empty, self.empty
        rows = self.frame.iloc[positions]
        exact = pd.Series(True, index=rows.index)
        for name in MEASUREMENT_FIELDS:
            if name in trial:
                exact &= rows[name].map(lambda v, value=trial[name]: _same(v, value))
        return rows, rows[exact]
