"""DataFrames as Markdown tables, each value formatted by what its column measures.

A column's unit is read from its name, the name it carries in MLflow (`runtime_mean_s`,
`mem_reserved_peak_bytes`, `gpu_busy_pct`), so a table needs no per-column format list; a pivot's
generated columns say their unit in `frame.attrs["unit"]`, and its cells that may be wrong in
`frame.attrs["marks"]`.
"""

from __future__ import annotations

import math

import pandas as pd

from tracking.report.marks import MARK, marked_cells

NA = "n/a"
NAMED = {"speedup": "x", "tokens_per_s": "rate", "exponent": "exp"}
DECIMALS = {"ms": 3, "us": 1, "exp": 2}


def _unit(column: str) -> str:
    if column in NAMED:
        return NAMED[column]
    for suffix, unit in (("_bytes", "bytes"), ("_pct", "pct"), ("_ms", "ms"), ("_us_per_step", "us"), ("_s", "s")):
        if column.endswith(suffix):
            return unit
    return ""


def cell(value, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NA
    if isinstance(value, str):
        return value.replace("|", "\\|").replace("\n", " ")
    if unit == "bytes":
        return f"{value / 2**20:,.1f} MiB"
    if unit == "pct":
        return f"{value:.1f}%"
    if unit == "usd":
        return f"${value:,.4g}"
    if unit == "g4":
        return f"{value:.4g}"
    if unit == "pct100":  # a fraction shown as a percentage
        return f"{100 * value:.1f}%"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "rate":
        return f"{value:,.0f}"
    if unit == "s":
        return f"{value:.4g}"
    if unit in DECIMALS:
        return f"{value:.{DECIMALS[unit]}f}"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _marked(text: str, flag: bool) -> str:
    return f"{text} {MARK}" if flag and text != NA else text


def to_markdown(frame: pd.DataFrame) -> str:
    """The table; a cell named in `attrs["marks"]` (tracking/report/marks.py) gets the mark after it."""
    units = {c: frame.attrs.get("unit", {}).get(c) or _unit(str(c)) for c in frame.columns}
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---:" if units[c] else "---" for c in frame.columns) + "|"
    cells = [
        [_marked(cell(v, units[c]), f) for v, f in zip(frame.iloc[:, i].tolist(), marked_cells(frame, c))]
        for i, c in enumerate(frame.columns)
    ]
    rows = zip(*cells) if cells else [()] * len(frame)  # column by column: a table of 5,520 rows
    body = ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join([header, rule, *body])
