"""What a compile costs, cold once per graph and warm beside it: a sweep that shares its compiled graphs
(sweep.inductor_cache=shared, sweeps/execution/compile_share.py) compiles each graph cold once and its twins
load it; their first runs answer different questions, so no figure here mixes the two. A first run from a
disturbed trial, and a ratio from one, carry the mark.
"""

from __future__ import annotations

import pandas as pd

from tokengen.contract.graphs import graph_key
from tokengen.contract.names import COLD, PARTLY_WARM, WARM
from tracking.report.comparison import POINT, finished, varying
from tracking.report.marks import either, mark


def compile_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Per compiled graph: the trial that compiled it cold and its first run, and its twins that loaded it warm:
    how many, their median first run and unpacking time, warm over cold. None where no trial loaded one warm."""
    rows = finished(frame)
    if "compile_cache" not in rows:
        return None
    rows = rows[rows["compile_cache"].isin([COLD, PARTLY_WARM, WARM])]
    if not (rows["compile_cache"] == WARM).any():
        return None
    keys = [graph_key(row, row.get("accelerator_type")) for _, row in rows.iterrows()]
    out, cold_marked, warm_marked = [], [], []
    for _, group in rows.assign(_graph=keys).groupby("_graph", sort=False):
        cold, warm = group[group["compile_cache"] != WARM], group[group["compile_cache"] == WARM]
        if cold.empty or warm.empty:
            continue
        first = cold.iloc[0]
        cold_s = float(first["first_run_s"])
        warm_s = float(pd.to_numeric(warm["first_run_s"], errors="coerce").median())
        load = pd.to_numeric(warm.get("compile_load_s", pd.Series(dtype=float)), errors="coerce")  # absent: none
        out.append(
            {
                **{c: first.get(c) for c in varying(frame) + ["variant"] + POINT},
                "cold_first_run_s": cold_s,
                "warm_trials": len(warm),
                "warm_first_run_s": warm_s,
                "warm_load_s": float(load.median()) if load.notna().any() else None,
                "warm_over_cold": warm_s / cold_s if cold_s > 0 else None,
            }
        )
        cold_marked.append(bool(first["own_marked"]))
        warm_marked.append(bool(warm["own_marked"].astype(bool).any()))
    if not out:
        return None
    table = pd.DataFrame(out)
    table.attrs["unit"] = {"warm_over_cold": "x"}
    mark(table, "cold_first_run_s", cold_marked)
    for column in ("warm_first_run_s", "warm_load_s"):
        mark(table, column, warm_marked)
    return mark(table, "warm_over_cold", either(cold_marked, warm_marked))
