"""Request workloads: static batching against continuous batching against transformers' own, per workload.

A request workload (requests > 0, tokengen/engines/request_server.py) has no `baseline` trial (a cache-less loop
cannot keep a position per slot), so the report's speedup column is empty for it. This table pairs
each workload's trials among themselves instead: every trial beside the workload's static-batching
trial with the same other knobs (else the first static one) and beside the workload's
hf_generate_batch peer, with the ratio of useful tokens/s and its 95% interval (tracking/report/figures/intervals.py,
from the runs' mean and standard deviation), and whether its tokens are the static trial's. A figure from a
disturbed trial, and a ratio with one on either side, carry the mark.
"""

from __future__ import annotations

import math

import pandas as pd

from tokengen.contract.declarations import PEER, knobs_except, plain, values
from tracking.report.comparison import POINT, REPORT_MATCH, finished, interval_text, varying
from tracking.report.figures.baselines import as_float, match_keys, timed_runs
from tracking.report.figures.intervals import ratio_interval, significant
from tracking.report.marks import mark

PEER_ENGINES = [d.name for d in values("engine") if d.family == PEER and d.server]
"""The transformers engines that serve requests: each request trial's peer."""
SAME_KNOBS = knobs_except("batching")
"""A continuous trial's static partner differs from it in `batching` alone, where the sweep has one."""
FIGURES = ["steps", "useful_tokens_per_s", "request_latency_p50_s", "request_latency_p90_s", "slot_occupancy"]


def useful_ratio(base: pd.Series, row: pd.Series) -> tuple[float, float, float]:
    """(ratio, low, high) of row's useful tokens/s over base's: the ratio of mean runtimes scaled by
    the ratio of useful tokens (1 when both served the same requests to the same ends)."""
    scale = as_float(row.get("useful_tokens")) / as_float(base.get("useful_tokens"))
    scale = scale if scale > 0 else 1.0  # NaN: compare runtimes alone
    stats = [(as_float(r["runtime_mean_s"]), as_float(r.get("runtime_std_s")), timed_runs(r)) for r in (base, row)]
    (b_mean, b_std, b_runs), (mean, std, runs) = [
        (m, 0.0 if math.isnan(s) else s, 0 if math.isnan(n) else int(n)) for m, s, n in stats
    ]
    if not (b_mean > 0 and mean > 0):
        return math.nan, math.nan, math.nan
    low, high = ratio_interval(b_mean, b_std, b_runs, mean, std, runs)
    return scale * b_mean / mean, scale * low, scale * high


def _partner(row: pd.Series, candidates: pd.DataFrame) -> pd.Series | None:
    if candidates.empty:
        return None
    same = candidates[[all(str(c[k]) == str(row.get(k)) for k in SAME_KNOBS) for _, c in candidates.iterrows()]]
    return (same if not same.empty else candidates).iloc[0]


def serving_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """One row per finished request trial: its figures, then `vs_static` and `vs_peer` (useful tokens/s
    over the static partner's and the peer's, with intervals) and `same_tokens` (its checksum against
    the static partner's). None when the sweep has no request workload with two trials to compare."""
    rows = finished(frame)
    if "requests" not in rows:
        return None
    rows = rows[pd.to_numeric(rows["requests"], errors="coerce").fillna(0) > 0]
    if rows.empty:
        return None
    rows = rows.assign(
        _workload=match_keys(rows, REPORT_MATCH),
        _engine=rows.get("engine", pd.Series(plain("engine").name, index=rows.index)).astype(str),
        _batching=rows.get("batching", pd.Series(plain("batching").name, index=rows.index)).astype(str),
    )
    out, marks = [], []
    for _, group in rows.groupby("_workload", sort=False):
        if len(group) < 2:
            continue
        peer = group["_engine"].isin(PEER_ENGINES)
        statics = group[(group["_batching"] == plain("batching").name) & ~peer]
        peers = group[peer]
        for _, row in group.iterrows():
            entry = {c: row.get(c) for c in varying(frame) + ["requests"] + POINT + ["variant"] + FIGURES}
            marks.append({c: bool(row["own_marked"]) for c in FIGURES if c != "steps"})  # a count, not a timing
            for name, base in (("vs_static", _partner(row, statics)), ("vs_peer", _partner(row, peers))):
                ratio, low, high = useful_ratio(base, row) if base is not None else (math.nan,) * 3
                same = base is not None and base.name == row.name
                entry[name] = ratio
                entry[f"{name}_interval"] = "" if same else interval_text(low, high, significant(low, high))
                marks[-1][name] = bool(row["own_marked"]) or (base is not None and bool(base["own_marked"]))
            static = _partner(row, statics)
            same = static is not None and row.get("tokens_sha256") == static.get("tokens_sha256")
            entry["same_tokens"] = "" if static is None or static.name == row.name else "ok" if same else "MISMATCH"
            out.append(entry)
    if not out:
        return None
    table = pd.DataFrame(out)
    table.attrs["unit"] = {"vs_static": "x", "vs_peer": "x", "slot_occupancy": "pct100", "useful_tokens_per_s": "rate"}
    for column in marks[0]:
        mark(table, column, [m[column] for m in marks])
    return table
