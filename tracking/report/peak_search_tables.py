"""A peak search's figure per variant and point, with its probes, and what a request at the peak costs per GPU type.

A peak-search sweep (sweeps/planning/peak_search.py) tags every probe with its search (peak_search) and its number
(peak_probe). Per search: the highest nominal rate that met the SLO below every rate that failed (the figure), the
lowest that failed (the peak lies between), the precision reached (their ratio less one), every probe in the order
it ran with its verdict, the drawn schedule's own rate at the figure (a draw of N requests is off its nominal rate
by about 1/sqrt(N)), the goodput there, and, where the sweep priced the device (sweep.prices, per GPU
type, `cpu` for a CPU node), the requests served within the SLO per dollar at the figure: a scaling study's
"which GPU serves this SLO cheapest". A search whose probe failed to run, or whose range held no peak, says so.
"""

from __future__ import annotations

import math

import pandas as pd

from tokengen.contract.names import FINISHED
from tracking.report.load_tables import load_rows, slo_verdict


def search_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """One row per search: its variant and point, figure, bounds, precision, probes, goodput and cost there."""
    if "peak_search" not in frame:
        return None
    probes = frame[frame["peak_search"].fillna("").astype(str) != ""]
    if probes.empty:
        return None
    labelled = load_rows(frame)
    curves = dict(zip(labelled.get("run_id", []), labelled.get("_curve", [])))
    out = []
    for search, group in probes.groupby("peak_search", sort=False):
        group = group.assign(_number=pd.to_numeric(group["peak_probe"], errors="coerce")).sort_values("_number")
        rate = pd.to_numeric(group["request_rate"], errors="coerce")
        verdicts = [slo_verdict(v) if s == FINISHED else None for v, s in zip(group["slo_met"], group["status"])]
        failing = min((r for r, v in zip(rate, verdicts) if v is False), default=None)
        good = [(r, i) for (r, v, i) in zip(rate, verdicts, group.index) if v and (failing is None or r < failing)]
        found, where = max(good, default=(None, None))
        first = group.iloc[0]
        price = first.get("price_per_hour")
        goodput = None if where is None else group.loc[where].get("goodput_rps")
        offered = None if where is None else group.loc[where].get("offered_rate_rps")
        out.append(
            {
                "curve": next((curves[i] for i in group.get("run_id", []) if i in curves), ""),
                "variant": first["variant"],
                "gpu_type": first.get("gpu_type"),
                "peak_rps": found,
                "fails_at_rps": failing,
                "within": None if found is None or failing is None else failing / found - 1,
                "probes": len(group),
                "probed": ", ".join(_probe_text(r, v) for r, v in zip(rate, verdicts)),
                "offered_at_peak_rps": offered,
                "goodput_at_peak_rps": goodput,
                "requests_per_usd": _per_dollar(goodput, price),
                "search": search,
            }
        )
    table = pd.DataFrame(out)
    for column in ("curve", "gpu_type"):
        if not table[column].fillna("").astype(str).astype(bool).any():
            table = table.drop(columns=column)
    rates = ("peak_rps", "fails_at_rps", "offered_at_peak_rps", "goodput_at_peak_rps", "requests_per_usd")
    table.attrs["unit"] = {c: "g4" for c in rates}
    table.attrs["unit"]["within"] = "pct100"
    return table


def _probe_text(rate: float, met: bool | None) -> str:
    return f"{rate:g} {'met' if met else 'failed' if met is False else 'no verdict'}"


def _per_dollar(goodput, price) -> float | None:
    """Requests within the SLO per USD: goodput (requests/s) over the device's price per second."""
    try:
        goodput, price = float(goodput), float(price)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(goodput) and math.isfinite(price)) or price <= 0:
        return None
    return goodput * 3600 / price
