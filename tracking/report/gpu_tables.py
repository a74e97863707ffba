"""What a useful token costs, and the same trials side by side per GPU type: tokens/s, cost per million
useful tokens (the sweep's sweep.prices) and NVML joules per useful token. A figure from a disturbed trial
carries the mark (tracking/report/marks.py), in the pivots too, cell by cell.
"""

from __future__ import annotations

import pandas as pd

from tracking.report.comparison import POINT, finished, pick, varying
from tracking.report.marks import mark

COST = {"useful_tokens_per_s": "tokens/s", "cost_per_mtok": "$/Mtok", "energy_j_per_token": "J/token"}


def cost_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Useful tokens/s, cost per million useful tokens (the sweep's sweep.prices) and NVML joules per
    useful token, per trial, where a price or an energy figure is known."""
    rows = finished(frame)
    known = rows[rows["cost_per_mtok"].notna() | pd.to_numeric(rows.get("energy_j_per_token"), errors="coerce").notna()]
    if known.empty:
        return None
    columns = varying(frame) + ["variant"] + POINT + ["gpu_type", "price_per_hour", *COST]
    table = pick(known, list(dict.fromkeys(columns)))  # gpu_type once, where the sweep varies it too
    table.attrs["unit"] = {"price_per_hour": "usd", "cost_per_mtok": "usd", "energy_j_per_token": "g4"}
    for column in COST:
        mark(table, column, known["own_marked"])
    return table


def _pivot(rows: pd.DataFrame, index: list[str], value: str, gpus: list[str], dropna: bool = True) -> pd.DataFrame:
    """One column per GPU type of `value`, the trials run on several side by side."""
    pivot = rows.pivot_table(index=index, columns="gpu_type", values=value, aggfunc="first", sort=False, dropna=dropna)
    return pivot.reindex(columns=gpus)


def gpu_cost_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Per GPU type side by side: tokens/s, cost per million tokens and joules per token of each trial
    that ran on two types or more (the scaling study's question: which GPU serves tokens cheapest)."""
    rows = finished(frame)
    gpus = sorted({g for g in rows["gpu_type"] if isinstance(g, str)})
    if len(gpus) < 2:
        return None
    index = [c for c in varying(frame) if c != "gpu_type"] + ["variant"] + POINT
    rows = rows.assign(_marked=rows["own_marked"].astype(float))
    marked = _pivot(rows, index, "_marked", gpus, dropna=False)
    parts = [
        _pivot(rows, index, value, gpus, dropna=False).rename(columns=lambda g, s=short: f"{g} {s}")
        for value, short in COST.items()
    ]
    table = pd.concat(parts, axis=1)
    table = table[table[[f"{g} tokens/s" for g in gpus]].notna().sum(axis=1) >= 2]
    if table.empty:
        return None
    marked = marked.reindex(table.index)
    table = table[[f"{g} {short}" for g in gpus for short in COST.values()]].dropna(axis=1, how="all").reset_index()
    table.attrs["unit"] = {
        c: {"tokens/s": "rate", "$/Mtok": "usd", "J/token": "g4"}[c.split(" ", 1)[1]] for c in table.columns if " " in c
    }
    for column in table.columns:
        if " " in str(column) and column.split(" ", 1)[0] in gpus:
            mark(table, column, marked[column.split(" ", 1)[0]])
    return table


def gpu_tables(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(f) The same trials side by side per GPU type, when the sweep ran some on more than one."""
    rows = finished(frame)
    gpus = sorted({g for g in rows["gpu_type"] if isinstance(g, str)})
    if len(gpus) < 2:
        return []
    index = [c for c in varying(frame) if c != "gpu_type"] + ["variant"] + POINT
    rows = rows.assign(_own=rows["own_marked"].astype(float), _speedup=rows["speedup_marked"].astype(float))
    out = []
    for value in ("runtime_mean_s", "speedup", "tokens_per_s"):
        pivot = _pivot(rows, index, value, gpus)
        pivot = pivot[pivot.notna().sum(axis=1) >= 2]  # only trials run on two types or more
        if pivot.empty:
            return []
        marked = _pivot(rows, index, "_speedup" if value == "speedup" else "_own", gpus).reindex(pivot.index)
        pivot = pivot.reset_index()
        pivot.columns = [str(c) for c in pivot.columns]
        pivot.attrs["unit"] = {g: {"runtime_mean_s": "s", "speedup": "x", "tokens_per_s": "rate"}[value] for g in gpus}
        for gpu in gpus:
            mark(pivot, gpu, marked[gpu])
        out.append((value, pivot))
    return out
