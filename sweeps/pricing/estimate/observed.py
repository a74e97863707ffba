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

from typing import Mapping

import numpy as np
import pandas as pd

from sweeps.pricing.estimate.hardware import gpu_kind
from sweeps.pricing.estimate.trials import AUTO, DEFAULTS, INSTRUMENTED_RUNS, family, is_auto, law, profile_runs, text
from tokengen.contract.declarations import EAGER, KNOBS, in_family
from tokengen.contract.names import WARM

REQUIRED = ("model", "device", "dtype", "batch_size", "max_seqlen", "steps", "runtime_mean_s")
METRICS = ("steps", "runtime_mean_s", "runtime_median_s", "first_run_s", "trial_wall_s", "child_wall_s")
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


def cold_starts(frame: pd.DataFrame, in_child: pd.Series) -> pd.Series:
    """Seconds of a worker's start-up each row carries: a row its worker ran first (started before any other of its
    sweep on its node finished; or without spans) its `in_child` beyond the others' median there; the rest 0."""
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
    if "measurement" in history:  # a run recorded before the tag existed counts as ok
        keep &= history["measurement"].isna() | (history["measurement"].astype(str).str.lower() == "ok")
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
    runs = pd.to_numeric(frame["runs"], errors="coerce").fillna(_number(frame, "runs_done"))  # runs=auto: runs_done
    warmup = _number(frame, "warmup_done").fillna(_number(frame, "warmup")).fillna(DEFAULTS["warmup"])  # auto: done
    mean, first = frame["runtime_mean_s"], frame["first_run_s"]
    without_first = (runs * mean - first) / (runs - 1)  # warmup=0: the first run is among the timed ones
    steady = mean.where(~((warmup == 0) & first.notna()), without_first.where(runs > 1))
    steady = steady.where(steady.notna() | ~frame["compile"].isin(in_family("compile", EAGER)), mean)  # first ~ timed
    frame["timed_runs_done"] = runs
    frame["steady_run_s"] = steady.where(steady > 0)
    frame["compile_s"] = (first - frame["steady_run_s"]).clip(lower=0)
    cache = frame["compile_cache"] if "compile_cache" in frame else pd.Series(None, index=frame.index, dtype=object)
    frame["compile_warm"] = (cache.astype(str) == WARM).map({True: "yes", False: "no"})  # graphs from a cache
    others = warmup + runs + INSTRUMENTED_RUNS - 1 + pd.Series([profile_runs(r) for r in records], frame.index)
    frame["build_s"] = (frame["trial_wall_s"] - first - others * frame["steady_run_s"]).clip(lower=0)
    in_child = (frame["child_wall_s"] - frame["trial_wall_s"]).clip(lower=0)
    frame["cold_start_s"] = cold_starts(frame, in_child)
    frame["in_child_s"] = in_child - frame["cold_start_s"]
    frame["warm_child_s"] = frame["child_wall_s"] - frame["cold_start_s"]
    span = _number(frame, "node_finished_at") - _number(frame, "node_started_at")
    frame["in_task_s"] = (span - frame["child_wall_s"]).clip(lower=0)
    return frame.reset_index(drop=True)
