"""The sweep's fallback summary: one row per trial key (its best attempt), when the MLflow report cannot
be built, led by the same measurement line as the report, its speedups marked as the report marks them. It reads
the driver's TrialRecords, flat (TrialRecord.to_dict) only where they become the table's rows."""

from __future__ import annotations

import math

import pandas as pd

from tokengen.contract.trial_record import TrialRecord
from tracking.measurement import MARK, OK, best, judged, summary_line
from tracking.report.figures.baselines import as_float, baseline_of, with_speedup

SUMMARY_COLUMNS = [
    "variant",
    "model",
    "dtype",
    "device",
    "batch_size",
    "max_seqlen",
    "prompt_len",
    "accelerator_type",
    "runtime_mean_s",
    "tokens_per_s",
    "speedup",
    "measurement",
    "attempt",
    "status",
    "error_type",
]


def best_records(records: list[TrialRecord]) -> list[dict]:
    """One row per key: its best attempt (tracking.measurement.best), in the order keys first came."""
    by_key: dict[str | None, list[dict]] = {}
    for order, record in enumerate(records):
        by_key.setdefault(record.key, []).append({"start_time": order, **record.to_dict()})
    return [best(rows) for rows in by_key.values()]


def summary_table(records: list[TrialRecord]) -> pd.DataFrame:
    """One row per key; a speedup whose trial or baseline is not ok carries the report's mark."""
    frame = with_speedup(pd.DataFrame(best_records(records)))
    for column in SUMMARY_COLUMNS:
        if column not in frame:
            frame[column] = None
    measurement = frame["measurement"].to_dict()
    base = [None if b is None else measurement[b] for b in baseline_of(frame)]
    frame["speedup"] = [
        f"{s:.4g} {MARK}" if {judged(m), judged(b)} - {None, OK} and not math.isnan(as_float(s)) else s
        for s, m, b in zip(frame["speedup"], frame["measurement"], base)
    ]
    table = frame[SUMMARY_COLUMNS].sort_values(
        ["model", "device", "batch_size", "max_seqlen", "variant"], kind="stable"
    )
    return table.dropna(axis=1, how="all").reset_index(drop=True)


def summary_text(records: list[TrialRecord]) -> str:
    """The measurement line, then the table."""
    chosen = [r for r in best_records(records) if r.get("status") == "finished"]
    line = summary_line([r.get("measurement") for r in chosen], [r.get("measurement_reasons") for r in chosen])
    table = summary_table(records).to_string(index=False, float_format=lambda v: f"{v:.4g}")
    return line + "\n" + table
