"""Tables over trial records: the speedup against each trial's matching baseline, and the sweep summary."""

from __future__ import annotations

import pandas as pd

MATCH = ["model", "dtype", "device", "batch_size", "max_seqlen", "stop", "sampling", "seed", "accelerator_type"]
"""A trial's baseline runs the same workload: these fields equal, variant 'baseline'."""

SUMMARY_COLUMNS = [
    "variant", "model", "dtype", "device", "batch_size", "max_seqlen", "accelerator_type",
    "runtime_mean_s", "tokens_per_s", "speedup", "status", "error_type",
]


def with_speedup(frame: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """Adds `speedup`: the matching baseline's mean runtime over the trial's (NaN without one)."""
    frame = frame.copy()
    for column in MATCH + ["variant", "runtime_mean_s"]:
        if column not in frame:
            frame[column] = None
    if "status" not in frame:
        frame["status"] = "finished"
    keys = pd.Series(["|".join(map(str, row)) for row in frame[MATCH].itertuples(index=False)], index=frame.index)
    finished = frame["status"] == "finished"
    base = frame[(frame["variant"] == baseline) & finished]
    base_runtime = dict(zip(keys[base.index], base["runtime_mean_s"]))
    frame["speedup"] = [
        base_runtime.get(k, float("nan")) / r if ok and r else float("nan")
        for k, r, ok in zip(keys, frame["runtime_mean_s"], finished)
    ]
    return frame


def summary_table(records: list[dict]) -> pd.DataFrame:
    frame = with_speedup(pd.DataFrame(records))
    for column in SUMMARY_COLUMNS:
        if column not in frame:
            frame[column] = None
    table = frame[SUMMARY_COLUMNS].sort_values(["model", "device", "batch_size", "max_seqlen", "variant"], kind="stable")
    return table.dropna(axis=1, how="all").reset_index(drop=True)
