"""Request workloads under load: goodput against the SLO per trial, and the highest rate each variant sustained.

A load trial is a request workload whose requests arrive over time (`request_rate > 0` or a `request_trace`:
tokengen/contract/arrivals.py). A load curve is every such trial of one point that differs only in its rate: the
plots (tracking/report/load_plots.py) draw latency against the achieved rate along it, one line per variant. The
goodput table lists each trial's offered and achieved rate, p50 and p99 TTFT and TPOT, its goodput and whether it
met the SLO it was judged by (recorded with it: tokengen/contract/slo.py); the peak table gives, per curve and
variant, the highest offered rate at which the SLO was met and the server kept up, the lowest above it that failed
(the peak lies between), and how many rates below it failed all the same (a curve that noise, or a machine that
shared with other processes, made non-monotonic). A figure of a noisy or contended trial carries the mark.
"""

from __future__ import annotations

import math

import pandas as pd

from tracking.report.comparison import REPORT_MATCH, finished, varying
from tracking.report.figures.baselines import match_keys
from tracking.report.marks import mark

CURVE = [c for c in REPORT_MATCH if c != "request_rate"]
"""A load curve's trials share every workload field but the rate (and the GPU type)."""
TIMINGS = [
    "offered_rate_rps",
    "achieved_rate_rps",
    "request_ttft_p50_s",
    "request_ttft_p99_s",
    "request_tpot_p50_s",
    "request_tpot_p99_s",
    "output_tokens_per_s",
    "goodput_rps",
]
BEHIND = "falling behind"  # tokengen/measure/load_figures.py's note, when achieved is below offered


def load_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The finished load trials, each with its curve's label (`_curve`: the fields its curve shares that vary)."""
    rows = finished(frame)
    if "request_rate" not in rows or "requests" not in rows:
        return rows.iloc[0:0]
    rate = pd.to_numeric(rows["request_rate"], errors="coerce").fillna(0)
    traced = rows["request_trace"].fillna("").astype(str) != "" if "request_trace" in rows else False
    rows = rows[(pd.to_numeric(rows["requests"], errors="coerce").fillna(0) > 0) & ((rate > 0) | traced)]
    if rows.empty:
        return rows
    shown = [c for c in CURVE if c in rows and rows[c].astype(str).nunique() > 1]
    labels = [", ".join(f"{c}={r[c]}" for c in shown) for _, r in rows.iterrows()]
    return rows.assign(_curve=labels or "", _curve_key=match_keys(rows, CURVE))


def slo_text(rows: pd.DataFrame) -> str:
    """The SLO the trials were judged by; several where trials of other sweeps were reused under another."""
    fields = ["slo_percentile", "slo_ttft_s", "slo_tpot_s"]
    if not all(c in rows for c in fields):
        return ""
    seen = {tuple(r) for r in rows[fields].dropna().itertuples(index=False)}
    texts = [f"p{p:g} TTFT <= {t * 1e3:g} ms and p{p:g} TPOT <= {o * 1e3:g} ms" for p, t, o in sorted(seen)]
    return " / ".join(texts)


def slo_verdict(value) -> bool | None:
    """A trial's slo_met as read back from the store (a bool, or its metric 1.0 / 0.0), None where it has none."""
    if value is True or value is False:
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number == 1


def _behind(note) -> bool:
    return isinstance(note, str) and BEHIND in note


def goodput_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """One row per load trial, by curve, variant and rate: rates, latencies, goodput, the SLO's verdict, notes."""
    rows = load_rows(frame)
    if rows.empty:
        return None
    rows = rows.sort_values(["_curve", "variant", "request_rate"], kind="stable")
    context = [c for c in varying(frame) if c in rows]
    columns = context + ["_curve", "variant", "request_rate", *TIMINGS, "slo_met", "serving_note"]
    table = rows[[c for c in columns if c in rows]].rename(columns={"_curve": "curve"}).reset_index(drop=True)
    if not table["curve"].astype(bool).any():
        table = table.drop(columns="curve")
    table["slo_met"] = [{True: "yes", False: "no", None: ""}[slo_verdict(v)] for v in table["slo_met"]]
    table.attrs["unit"] = {c: "g4" for c in ("request_rate", "offered_rate_rps", "achieved_rate_rps", "goodput_rps")}
    table.attrs["unit"]["output_tokens_per_s"] = "rate"
    for column in TIMINGS:
        if column in table:
            mark(table, column, rows["own_marked"].astype(bool).tolist())
    return table


def peak_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Per curve and variant: the highest offered rate among its trials that met the SLO and kept up, its goodput
    there, the lowest rate above it that did not (between the two lies its peak, to the grid's resolution), and how
    many rates below it failed."""
    rows = load_rows(frame)
    if rows.empty or "slo_met" not in rows:
        return None
    out = []
    for (curve, variant), group in rows.groupby(["_curve", "variant"], sort=False):
        good = group[[bool(m) is True and not _behind(n) for m, n in zip(group["slo_met"], group["serving_note"])]]
        bad = group.drop(good.index)
        best = good.loc[pd.to_numeric(good["offered_rate_rps"]).idxmax()] if not good.empty else None
        top = -math.inf if best is None else float(best["offered_rate_rps"])
        failed = pd.to_numeric(bad["offered_rate_rps"])
        out.append(
            {
                "curve": curve,
                "variant": variant,
                "rates_tried": len(group),
                "highest_rate_meeting_slo": None if best is None else best["offered_rate_rps"],
                "goodput_there_rps": None if best is None else best["goodput_rps"],
                "lowest_rate_failing_above": failed[failed > top].min() if (failed > top).any() else None,
                "failed_below": int((failed < top).sum()),
            }
        )
    table = pd.DataFrame(out)
    if not table["curve"].astype(bool).any():
        table = table.drop(columns="curve")
    table.attrs["unit"] = {
        c: "g4" for c in ("highest_rate_meeting_slo", "goodput_there_rps", "lowest_rate_failing_above")
    }
    return table
