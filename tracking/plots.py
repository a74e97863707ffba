"""The report's pictures, where a shape reads faster than a table: runtime against max_seqlen (the
O(N^2) baseline against O(N) caches), speedup against batch size, allocated against reserved memory.

Each function writes one PNG (matplotlib's Agg backend: no display needed) and returns its path,
or None when the sweep lacks the data for it. A sweep over several models, dtypes or GPU types is
drawn for one of them, the one with the most trials (named in the title): the tables hold the rest,
and a line per variant per context would be unreadable.
"""

from __future__ import annotations

import zlib
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
import pandas as pd  # noqa: E402

from tokengen.contract.variants import VARIANTS  # noqa: E402
from tracking.baselines import match_keys  # noqa: E402
from tracking.report_tables import finished, varying  # noqa: E402

MAX_PANELS = 6
MARKERS = "os^vD<>p*h"


def primary(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The finished trials of the context (model, dtype, GPU type, ...) with the most trials, and its name."""
    rows, context = finished(frame), varying(frame)
    if rows.empty or not context:
        return rows, ""
    keys = match_keys(rows, context)
    top = Counter(keys).most_common(1)[0][0]
    rows = rows[[k == top for k in keys]]
    return rows, ", ".join(f"{c}={rows[c].iloc[0]}" for c in context)


def style_of(variant: str) -> dict:
    """One colour and marker per variant, fixed by its place among the presets, so a variant looks the
    same in every plot of every report; other names (custom knob settings) hash to a stable slot."""
    names = list(VARIANTS)
    index = names.index(variant) if variant in names else len(names) + zlib.crc32(variant.encode()) % 20
    return {"color": plt.get_cmap("tab20")(index % 20), "marker": MARKERS[index % len(MARKERS)]}


def _style(rows: pd.DataFrame) -> dict[str, dict]:
    variants = rows.sort_values(["variant_rank", "variant"])["variant"].unique()
    return {v: style_of(v) for v in variants}


def _drawable(rows: pd.DataFrame, x: str, y: str) -> dict[str, pd.DataFrame]:
    """Each variant's points, sorted along x, where it has a line (two points or more)."""
    points = {v: g.dropna(subset=[x, y]).sort_values(x) for v, g in rows.groupby("variant", sort=False)}
    return {v: p for v, p in points.items() if len(p) >= 2}


def _panels(rows: pd.DataFrame, by: str, x: str, y: str, ylabel: str, title: str, path: Path,
            logy: bool = False) -> Path | None:
    """One panel per value of `by` that has a line, one line per variant, log-scaled x at the data's values."""
    panels = [(v, lines) for v in sorted(rows[by].dropna().unique())
              if (lines := _drawable(rows[rows[by] == v], x, y))][:MAX_PANELS]
    if not panels:
        return None
    style, handles = _style(rows), {}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4), squeeze=False, sharey=True)
    for ax, (value, lines) in zip(axes[0], panels):
        for variant, points in lines.items():
            handles[variant] = ax.plot(points[x], points[y], **style[variant])[0]
        ticks = sorted({int(t) for p in lines.values() for t in p[x]})
        ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_title(f"{by} = {value}")
        ax.set_xlabel(x)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    fig.suptitle(title)
    ordered = [v for v in style if v in handles]
    fig.legend([handles[v] for v in ordered], ordered, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return path


def _titled(what: str, context: str) -> str:
    return f"{what} ({context})" if context else what


def runtime_vs_seqlen(frame: pd.DataFrame, out: Path) -> Path | None:
    """Log-log against the decode steps each trial actually ran (under a length distribution a checked
    variant stops with its batch), so the full recompute's O(N^2) and a cache's O(N) read as slopes 2 and 1."""
    rows, context = primary(frame)
    if rows.empty or rows["max_seqlen"].nunique() < 2:
        return None
    return _panels(rows, "batch_size", "steps", "runtime_mean_s", "runtime_mean_s (s, log)",
                   _titled("Runtime against decode steps run", context), out / "runtime_vs_seqlen.png", logy=True)


def speedup_vs_batch(frame: pd.DataFrame, out: Path) -> Path | None:
    rows, context = primary(frame)
    rows = rows[(rows["variant"] != "baseline") & rows["speedup"].notna()]
    if rows.empty or rows["batch_size"].nunique() < 2:
        return None
    return _panels(rows, "max_seqlen", "batch_size", "speedup", "speedup over baseline (x)",
                   _titled("Speedup against batch size", context), out / "speedup_vs_batch.png")


def memory(frame: pd.DataFrame, out: Path) -> Path | None:
    """Allocated and reserved peaks per variant at the largest workload (batch x max_seqlen)."""
    rows, context = primary(frame)
    if "mem_reserved_peak_bytes" not in rows or rows["mem_reserved_peak_bytes"].isna().all():
        return None
    rows = rows.dropna(subset=["mem_reserved_peak_bytes"])
    size = rows["batch_size"] * rows["max_seqlen"]
    rows = rows[size == size.max()]
    rows = rows.groupby(["variant_rank", "variant"], sort=True).agg(
        allocated=("mem_allocated_peak_bytes", "max"), reserved=("mem_reserved_peak_bytes", "max")).reset_index()
    unit, scale = ("GiB", 2**30) if rows["reserved"].max() >= 2**30 else ("MiB", 2**20)
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(rows)), 4))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], rows["allocated"] / scale, width=0.4, label="allocated peak")
    ax.bar([i + 0.2 for i in x], rows["reserved"] / scale, width=0.4, label="reserved peak")
    ax.set_xticks(list(x), rows["variant"], rotation=45, ha="right")
    ax.set_ylabel(unit)
    ax.set_title(f"CUDA memory at batch x max_seqlen = {int(size.max())}" + (f"\n{context}" if context else ""))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    path = out / "memory.png"
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return path


PLOTS = {
    "runtime against max_seqlen": runtime_vs_seqlen,
    "speedup against batch size": speedup_vs_batch,
    "memory: allocated vs reserved peak": memory,
}
