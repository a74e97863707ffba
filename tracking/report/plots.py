"""The report's pictures, where a shape reads faster than a table: runtime and speedup against the
decode steps (the O(N^2) baseline against O(N) caches), speedup against batch size, allocated
against reserved memory.

Each function writes one PNG (matplotlib's Agg backend: no display needed) at least WIDTH_PX wide
and returns its path, or None when the sweep lacks the data for it. Every point carries its 95%
interval as an error bar (tracking/report/figures/intervals.py: the mean runtime's Student t interval, the
speedup's delta-method interval); a point the tables mark (tracking/report/marks.py: a runtime from a
noisy or contended trial, a speedup whose trial or baseline was, or whose tokens are unchecked or below the
gate) is drawn hollow, and a memory bar of such a trial carries the mark in its label. Colours are Okabe and Ito's colour-blind-safe palette, one per
variant of the sweep (in preset order), with a marker of its own, the same in every plot of a
report. A sweep over several models, dtypes or GPU types is drawn for one of them, the one with
the most trials (named in the title): the tables hold the rest.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from tracking.report.comparison import finished, varying  # noqa: E402
from tracking.report.figures.baselines import match_keys, timed_runs  # noqa: E402
from tracking.report.figures.intervals import mean_interval  # noqa: E402
from tracking.report.marks import MARK  # noqa: E402

MAX_PANELS = 6
MAX_LINES = 12  # variants per panel: beyond a dozen the lines cannot be told apart, and drawing them takes seconds
DPI = 100
WIDTH_PX = 1200  # every figure: people read these on a screen, not as thumbnails
PANEL_HEIGHT_IN = 4.2
MARKERS = "os^vD<>p*h"
LINESTYLES = ("-", "--", ":", "-.")
OKABE_ITO = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#D55E00", "#0072B2", "#CC79A7", "#F0E442")
"""Okabe & Ito (2008), "Color Universal Design": told apart with any colour vision; yellow last (faint on white)."""


def primary(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The finished trials of the context (model, dtype, GPU type, ...) with the most trials, and its name."""
    rows, context = finished(frame), varying(frame)
    if rows.empty or not context:
        return rows, ""
    keys = match_keys(rows, context)
    top = Counter(keys).most_common(1)[0][0]
    rows = rows[[k == top for k in keys]]
    return rows, ", ".join(f"{c}={rows[c].iloc[0]}" for c in context)


def palette(frame: pd.DataFrame) -> dict[str, dict]:
    """One style per variant of the sweep, in preset order: an Okabe-Ito colour, a marker, and past eight
    variants another line style, so no two variants of a report look alike."""
    rows = frame[frame["in_sweep"].astype(bool)] if "in_sweep" in frame else frame
    variants = rows.sort_values(["variant_rank", "variant"])["variant"].dropna().unique()
    return {
        v: {
            "color": OKABE_ITO[i % len(OKABE_ITO)],
            "marker": MARKERS[i % len(MARKERS)],
            "linestyle": LINESTYLES[(i // len(OKABE_ITO)) % len(LINESTYLES)],
        }
        for i, v in enumerate(variants)
    }


LINE_COLUMNS = (
    "variant",
    "batch_size",
    "max_seqlen",
    "steps",
    "runtime_mean_s",
    "runtime_std_s",
    "runs",
    "runs_done",
    "speedup",
    "speedup_low",
    "speedup_high",
    "speedup_marked",
    "own_marked",
)
"""What a line plot reads: a frame of only these copies in milliseconds where the report's hundred columns take seconds."""


def fastest(rows: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows of the baseline and of the MAX_LINES - 1 variants with the highest median speedup (all of
    them where there are no more), with the columns a line plot reads, and the note that says so."""
    rows = rows[[c for c in LINE_COLUMNS if c in rows]]
    variants = rows["variant"].dropna().unique()
    if len(variants) <= MAX_LINES:
        return rows, ""
    medians = rows[rows["variant"] != "baseline"].groupby("variant")["speedup"].median().sort_values(ascending=False)
    kept = {"baseline", *medians.index[: MAX_LINES - 1]}
    return rows[
        rows["variant"].isin(kept)
    ], f"the {MAX_LINES - 1} fastest of {len(variants) - 1} variants by median speedup"


def _drawable(rows: pd.DataFrame, x: str, y: str) -> dict[str, pd.DataFrame]:
    """Each variant's points, sorted along x, where it has a line (two points or more)."""
    points = {v: g.dropna(subset=[x, y]).sort_values(x) for v, g in rows.groupby("variant", sort=False)}
    return {v: p for v, p in points.items() if len(p) >= 2}


def runtime_bars(points: pd.DataFrame) -> tuple[list[float], list[float]]:
    """Each point's mean runtime interval as (below, above) error bar lengths."""
    below, above = [], []
    for _, row in points.iterrows():
        mean = float(row["runtime_mean_s"])
        std, runs = pd.to_numeric(row.get("runtime_std_s"), errors="coerce"), timed_runs(row)
        low, high = mean_interval(mean, float(std), 0 if math.isnan(runs) else int(runs))
        below.append(0.0 if math.isnan(low) else mean - max(low, mean * 1e-3))  # a log axis: stay above zero
        above.append(0.0 if math.isnan(high) else high - mean)
    return below, above


def speedup_bars(points: pd.DataFrame) -> tuple[list[float], list[float]]:
    below, above = [], []
    for s, low, high in zip(points["speedup"], points["speedup_low"], points["speedup_high"]):
        below.append(0.0 if pd.isna(low) else max(0.0, s - low))
        above.append(0.0 if pd.isna(high) else max(0.0, high - s))
    return below, above


def _line(ax, points: pd.DataFrame, x: str, y: str, style: dict, bars, flag: str = "speedup_marked") -> object:
    """A variant's line with its error bars; points whose `flag` marks them (tracking/report/marks.py) hollow."""
    marked = points[flag].astype(bool) if flag in points else pd.Series(False, index=points.index)
    line = dict(color=style["color"], linestyle=style["linestyle"], marker=style["marker"], markersize=7)
    ax.errorbar(points[x], points[y], yerr=bars(points), capsize=3, linewidth=1.5, **line)
    unsure = points[marked.to_numpy()]
    if len(unsure):  # hollow, over the filled marker the line drew there
        hollow = dict(markersize=9, markerfacecolor="white", markeredgecolor=style["color"], markeredgewidth=1.8)
        ax.plot(unsure[x], unsure[y], linestyle="none", marker=style["marker"], zorder=3, **hollow)
    return Line2D([], [], color=style["color"], marker=style["marker"], linestyle=style["linestyle"], markersize=7)


def _axis(ax, lines: dict, x: str, title: str, ylabel: str, logy: bool = False) -> None:
    ticks = sorted({int(t) for p in lines.values() for t in p[x]})
    ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_title(title)
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def _figure(rows: int, columns: int):
    width = max(WIDTH_PX / DPI, 5.5 * columns + 2.5)  # room for the legend on the right
    return plt.subplots(rows, columns, figsize=(width, PANEL_HEIGHT_IN * rows), squeeze=False, layout="constrained")


def _finish(fig, handles: dict, styles: dict, title: str, path: Path, note: str = "") -> Path:
    ordered = [v for v in styles if v in handles]
    fig.legend([handles[v] for v in ordered], ordered, loc="outside right upper", fontsize=9)
    fig.suptitle(title + (f"\n{note}" if note else ""))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


HOLLOW_NOTE = (
    "error bars: 95% intervals; hollow (marked !): a runtime from a noisy or contended trial, a speedup whose "
    "trial or baseline was, or whose tokens are unchecked or below the gate"
)


def runtime_vs_seqlen(frame: pd.DataFrame, out: Path) -> Path | None:
    """Per batch size, two panels side by side: runtime against the decode steps each trial ran (log-log,
    so the full recompute's O(N^2) and a cache's O(N) read as slopes 2 and 1) and each variant's speedup
    over the baseline against the same steps (a cache's grows with them)."""
    rows, context = primary(frame)
    if rows.empty or rows["max_seqlen"].nunique() < 2:
        return None
    rows, shown = fastest(rows)
    context = "; ".join(part for part in (context, shown) if part)
    styles = palette(frame)
    panels = []
    for batch in sorted(rows["batch_size"].dropna().unique()):
        at = rows[rows["batch_size"] == batch]
        runtime = _drawable(at, "steps", "runtime_mean_s")
        speedup = _drawable(at[(at["variant"] != "baseline") & at["speedup"].notna()], "steps", "speedup")
        if runtime:
            panels.append((batch, runtime, speedup))
    panels = panels[:MAX_PANELS]
    if not panels:
        return None
    fig, axes = _figure(len(panels), 2)
    handles = {}
    for (batch, runtime, speedup), (left, right) in zip(panels, axes):
        for variant, points in runtime.items():
            handles[variant] = _line(
                left, points, "steps", "runtime_mean_s", styles[variant], runtime_bars, flag="own_marked"
            )
        _axis(left, runtime, "steps", f"runtime, batch_size = {batch}", "runtime_mean_s (s, log)", logy=True)
        for variant, points in speedup.items():
            handles[variant] = _line(right, points, "steps", "speedup", styles[variant], speedup_bars)
        if speedup:
            right.axhline(1.0, color="grey", linewidth=1, linestyle=":")
            _axis(right, speedup, "steps", f"speedup over baseline, batch_size = {batch}", "speedup (x)")
        else:
            right.set_axis_off()
    title = "Runtime and speedup against decode steps run" + (f" ({context})" if context else "")
    return _finish(fig, handles, styles, title, out / "runtime_vs_seqlen.png", HOLLOW_NOTE)


def speedup_vs_batch(frame: pd.DataFrame, out: Path) -> Path | None:
    rows, context = primary(frame)
    rows = rows[(rows["variant"] != "baseline") & rows["speedup"].notna()]
    if rows.empty or rows["batch_size"].nunique() < 2:
        return None
    rows, shown = fastest(rows)
    context = "; ".join(part for part in (context, shown) if part)
    styles = palette(frame)
    panels = [
        (v, lines)
        for v in sorted(rows["max_seqlen"].dropna().unique())
        if (lines := _drawable(rows[rows["max_seqlen"] == v], "batch_size", "speedup"))
    ][:MAX_PANELS]
    if not panels:
        return None
    fig, axes = _figure(1, len(panels))
    handles = {}
    for ax, (value, lines) in zip(axes[0], panels):
        for variant, points in lines.items():
            handles[variant] = _line(ax, points, "batch_size", "speedup", styles[variant], speedup_bars)
        ax.axhline(1.0, color="grey", linewidth=1, linestyle=":")
        _axis(ax, lines, "batch_size", f"max_seqlen = {value}", "speedup over baseline (x)")
    title = "Speedup against batch size" + (f" ({context})" if context else "")
    return _finish(fig, handles, styles, title, out / "speedup_vs_batch.png", HOLLOW_NOTE)


def memory(frame: pd.DataFrame, out: Path) -> Path | None:
    """Allocated and reserved peaks per variant at the largest workload (batch x max_seqlen)."""
    rows, context = primary(frame)
    if "mem_reserved_peak_bytes" not in rows or rows["mem_reserved_peak_bytes"].isna().all():
        return None
    rows = rows.dropna(subset=["mem_reserved_peak_bytes"])
    size = rows["batch_size"] * rows["max_seqlen"]
    rows = rows[size == size.max()]
    rows = (
        rows.assign(_marked=rows["own_marked"].astype(bool))
        .groupby(["variant_rank", "variant"], sort=True)
        .agg(
            allocated=("mem_allocated_peak_bytes", "max"),
            reserved=("mem_reserved_peak_bytes", "max"),
            marked=("_marked", "any"),
        )
        .reset_index()
    )
    unit, scale = ("GiB", 2**30) if rows["reserved"].max() >= 2**30 else ("MiB", 2**20)
    fig, ax = plt.subplots(figsize=(max(WIDTH_PX / DPI, 0.7 * len(rows) + 3), 5), layout="constrained")
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], rows["allocated"] / scale, width=0.4, label="allocated peak", color=OKABE_ITO[5])
    ax.bar([i + 0.2 for i in x], rows["reserved"] / scale, width=0.4, label="reserved peak", color=OKABE_ITO[1])
    labels = [f"{v} {MARK}" if m else v for v, m in zip(rows["variant"], rows["marked"])]
    ax.set_xticks(list(x), labels, rotation=45, ha="right")
    ax.set_ylabel(unit)
    note = f"{MARK}: measured by a noisy or contended trial" if rows["marked"].any() else ""
    title = f"CUDA memory at batch x max_seqlen = {int(size.max())}"
    ax.set_title("\n".join(part for part in (title, context, note) if part))
    ax.legend(loc="upper left", fontsize=9)
    path = out / "memory.png"
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


PLOTS = {
    "runtime and speedup against decode steps": runtime_vs_seqlen,
    "speedup against batch size": speedup_vs_batch,
    "memory: allocated vs reserved peak": memory,
}
