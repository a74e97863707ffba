"""The sweep's fallback summary: one row per trial record, when the MLflow report cannot be built."""

from __future__ import annotations

import pandas as pd

from tracking.baselines import with_speedup

SUMMARY_COLUMNS = [
    "variant", "model", "dtype", "device", "batch_size", "max_seqlen", "prompt_len", "accelerator_type",
    "runtime_mean_s", "tokens_per_s", "speedup", "status", "error_type",
]


def summary_table(records: list[dict]) -> pd.DataFrame:
    frame = with_speedup(pd.DataFrame(records))
    for column in SUMMARY_COLUMNS:
        if column not in frame:
            frame[column] = None
    table = frame[SUMMARY_COLUMNS].sort_values(["model", "device", "batch_size", "max_seqlen", "variant"], kind="stable")
    return table.dropna(axis=1, how="all").reset_index(drop=True)
