"""Matching each trial to its baseline (the same workload, variant `baseline`) and its speedup over it."""

from __future__ import annotations

import math

import pandas as pd

from tokengen.names import FINISHED
from tokengen.spec import WORKLOAD_FIELDS

MATCH = [*WORKLOAD_FIELDS, "accelerator_type"]
"""A trial's baseline runs the same workload (tokengen.spec's workload fields) on the same GPU type."""


def key_part(value) -> str:
    """One field of a match key; built in plain Python so None, NaN and 4 vs 4.0 all key alike."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def match_keys(frame: pd.DataFrame, columns: list[str]) -> list[str]:
    present = [c for c in columns if c in frame]
    rows = frame[present].itertuples(index=False) if present else ([] for _ in range(len(frame)))
    return ["|".join(key_part(v) for v in row) for row in rows]


def partners(frame: pd.DataFrame, candidates: pd.DataFrame, columns: list[str]) -> pd.Series:
    """For each row of `frame`, the index label of the candidate row equal on `columns` (None without one)."""
    lookup = dict(zip(match_keys(candidates, columns), candidates.index))
    return pd.Series([lookup.get(k) for k in match_keys(frame, columns)], index=frame.index, dtype=object)


def baseline_of(frame: pd.DataFrame, baseline: str = "baseline", match: list[str] = MATCH) -> pd.Series:
    """Index label of each trial's matching finished baseline trial (None without one)."""
    status = frame["status"] if "status" in frame else pd.Series(FINISHED, index=frame.index)
    variant = frame["variant"] if "variant" in frame else pd.Series(None, index=frame.index, dtype=object)
    base = frame[(variant == baseline) & (status == FINISHED)]
    if "in_sweep" in base:  # the sweep's own baseline wins over one borrowed from another sweep
        base = base.sort_values("in_sweep", key=lambda s: s.astype(bool), kind="stable")
    return partners(frame, base, match)


def with_speedup(frame: pd.DataFrame, baseline: str = "baseline", match: list[str] = MATCH) -> pd.DataFrame:
    """Adds `speedup`: the matching baseline's mean runtime over the trial's (NaN without one)."""
    frame = frame.copy()
    for column in match + ["variant", "runtime_mean_s"]:
        if column not in frame:
            frame[column] = None
    if "status" not in frame:
        frame["status"] = FINISHED
    base = baseline_of(frame, baseline, match)
    runtime = frame["runtime_mean_s"]
    frame["speedup"] = [
        runtime[b] / r if b is not None and ok and r else float("nan")
        for b, r, ok in zip(base, runtime, frame["status"] == FINISHED)
    ]
    return frame
