"""The figures a report derives for each trial's run (its speedup and interval, vs_generate, its token
verdict, the view's columns rounded for display), as the store's write-back (tracking/store/derived.py)
takes them."""

from __future__ import annotations

import math

import pandas as pd

from tracking.report.figures.baselines import baseline_of
from tracking.rows import plain_rows
from tracking.store.derived import COLUMN_OF, DERIVED_METRICS, DERIVED_TAGS, SHOWN, SHOWN_PREFIX

DIGITS = 4  # significant digits of a figure as the view shows it


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def rounded(value: float, digits: int) -> float:
    """The value to `digits` significant digits (49.07644088 -> 49.08)."""
    return float(f"{value:.{digits}g}")


def _text(value) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value)
    return text or None


def figures(frame: pd.DataFrame, match: list[str]) -> dict[str, tuple[dict[str, float], dict[str, str]]]:
    """Per run id of each trial of the sweep: (its derived metrics, its derived tags), known ones only."""
    base, run_ids = baseline_of(frame, match=match), frame["run_id"].to_dict()
    mine = frame[frame["in_sweep"].astype(bool)] if "in_sweep" in frame else frame
    read = {"run_id", *DERIVED_METRICS, *SHOWN, *(COLUMN_OF.get(name, name) for name in DERIVED_TAGS)}
    out = {}
    for label, row in plain_rows(mine, [c for c in mine.columns if c in read]).items():
        metrics = {name: v for name in DERIVED_METRICS if (v := _number(row.get(name))) is not None}
        metrics |= {
            SHOWN_PREFIX + name: rounded(v, DIGITS) for name in SHOWN if (v := _number(row.get(name))) is not None
        }
        tags = {name: v for name in DERIVED_TAGS if (v := _text(row.get(COLUMN_OF.get(name, name)))) is not None}
        if "speedup" in metrics and base[label] is not None:
            tags["baseline_run_id"] = str(run_ids[base[label]])
        out[str(row["run_id"])] = (metrics, tags)
    return out
