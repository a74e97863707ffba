"""Request workloads under load, drawn: latency against throughput, and the Pareto front of tokens/s.

- `latency_vs_rate`: per load curve (a point's trials differing only in their rate: tracking/report/load_tables.py)
  two panels, TTFT and TPOT against the achieved rate, p50 solid and p99 dashed, one colour per variant, each line
  through the trials in the order of their offered rate; the SLO's limits as grey lines. A curve bends up where a
  variant stops keeping up, and turns back where its achieved rate stops growing with the offered one.
- `pareto`: per curve, every load trial as a point, tokens/s per user (1 / its p50 TPOT) against tokens/s per device
  (output tokens/s), and the frontier: the points no other point beats on both.

Hollow points are marked figures (a noisy or contended trial). Styles are the report's (tracking/report/plots.py).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tracking.report.load_tables import load_rows
from tracking.report.plots import MAX_PANELS, _figure, _finish, palette

LATENCIES = (("ttft", "TTFT", "slo_ttft_s"), ("tpot", "TPOT", "slo_tpot_s"))
PERCENTILES = (("p50", "-"), ("p99", "--"))


def _curves(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    rows = load_rows(frame)
    if rows.empty:
        return []
    return [(label, group) for label, group in rows.groupby("_curve", sort=True)][:MAX_PANELS]


def _points(ax, points: pd.DataFrame, x: str, y: str, style: dict, linestyle: str):
    from matplotlib.lines import Line2D

    points = points.assign(_x=pd.to_numeric(points[x], errors="coerce"), _y=pd.to_numeric(points[y], errors="coerce"))
    order = pd.to_numeric(points["request_rate"], errors="coerce") if "request_rate" in points else points["_x"]
    points = points.assign(_order=order).dropna(subset=["_x", "_y"]).sort_values(["_order", "_x"])
    if points.empty:
        return None
    ax.plot(points["_x"], points["_y"], color=style["color"], marker=style["marker"], linestyle=linestyle, markersize=6)
    marked = points[points["own_marked"].astype(bool)]
    if len(marked):
        hollow = dict(markersize=8, markerfacecolor="white", markeredgecolor=style["color"], markeredgewidth=1.6)
        ax.plot(marked["_x"], marked["_y"], linestyle="none", marker=style["marker"], zorder=3, **hollow)
    return Line2D([], [], color=style["color"], marker=style["marker"], linestyle="-", markersize=6)


def latency_vs_rate(frame: pd.DataFrame, out: Path) -> Path | None:
    curves = _curves(frame)
    if not curves:
        return None
    styles = palette(frame)
    fig, axes = _figure(len(curves), 2)
    handles = {}
    for (label, rows), panels in zip(curves, axes):
        for ax, (name, title, limit) in zip(panels, LATENCIES):
            for variant, points in rows.groupby("variant", sort=False):
                for stat, linestyle in PERCENTILES:
                    line = _points(
                        ax, points, "achieved_rate_rps", f"request_{name}_{stat}_s", styles[variant], linestyle
                    )
                    handles[variant] = line or handles.get(variant)
            slo = pd.to_numeric(rows.get(limit), errors="coerce").dropna()
            if len(slo):
                ax.axhline(float(slo.iloc[0]), color="grey", linewidth=1, linestyle=":")
            ax.set_yscale("log")
            ax.set_title(f"{title}{f' ({label})' if label else ''}")
            ax.set_xlabel("achieved rate (requests/s)")
            ax.set_ylabel(f"{title} (s, log): p50 solid, p99 dashed")
            ax.grid(alpha=0.3)
    handles = {v: h for v, h in handles.items() if h is not None}
    note = "dotted: the SLO's limit; hollow (marked !): a noisy or contended trial"
    return _finish(fig, handles, styles, "Latency against achieved rate", out / "latency_vs_rate.png", note)


def frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other beats on both x and y (higher is better on both), in increasing x."""
    best, kept = float("-inf"), []
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if y > best:
            kept.append((x, y))
            best = y
    return sorted(kept)


def pareto(frame: pd.DataFrame, out: Path) -> Path | None:
    curves = _curves(frame)
    if not curves:
        return None
    styles = palette(frame)
    fig, axes = _figure(1, len(curves))
    handles = {}
    for ax, (label, rows) in zip(axes[0], curves):
        rows = rows.assign(per_user=1.0 / pd.to_numeric(rows["request_tpot_p50_s"], errors="coerce"))
        for variant, points in rows.groupby("variant", sort=False):
            line = _points(ax, points, "output_tokens_per_s", "per_user", styles[variant], "none")
            handles[variant] = line or handles.get(variant)
        both = rows[["output_tokens_per_s", "per_user"]].apply(pd.to_numeric, errors="coerce").dropna()
        front = frontier(list(both.itertuples(index=False, name=None)))
        if front:
            ax.plot(*zip(*front), color="grey", linewidth=1.5, linestyle="-", zorder=1, drawstyle="steps-pre")
        ax.set_title(f"Pareto{f' ({label})' if label else ''}")
        ax.set_xlabel("tokens/s per device (output tokens/s)")
        ax.set_ylabel("tokens/s per user (1 / p50 TPOT)")
        ax.grid(alpha=0.3)
    handles = {v: h for v, h in handles.items() if h is not None}
    note = "grey: the frontier (no point beats it on both); hollow (marked !): a noisy or contended trial"
    return _finish(fig, handles, styles, "Tokens/s per user against tokens/s per device", out / "pareto.png", note)


LOAD_PLOTS = {"latency against achieved rate": latency_vs_rate, "Pareto: tokens/s per user and per device": pareto}
