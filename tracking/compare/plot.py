"""The comparison at a glance: per variant, B/A with its 95% interval at each point (batch size, prompt length,
decode steps), one panel per model and dtype, on a log axis centred on 1.0. Variants keep the report's colours and
markers (tracking/report/plots.py) and sit side by side at each point so their intervals do not hide each other; a
point that a side judged noisy or contended is hollow.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator  # noqa: I001 - after plots chose the backend

from tracking.compare.points import rank
from tracking.report.comparison import POINT
from tracking.report.plots import DPI, MARKERS, MAX_PANELS, OKABE_ITO, PANEL_HEIGHT_IN, WIDTH_PX, plt

FILE = "ratio_by_point.png"
SPREAD = 0.6  # of the distance between two points, shared by the variants drawn at each
TICKS = (1.0, 1.25, 1.6, 2.0, 2.5, 3.2, 4.0, 5.0, 6.4, 8.0)  # log-even steps, so a ratio near 1.0 still reads


def ratio_plot(pairs: pd.DataFrame, out: Path, title: str) -> Path | None:
    """The PNG, or None where no matched point has a ratio."""
    rows = pairs[pd.to_numeric(pairs["ratio"], errors="coerce") > 0]
    if rows.empty:
        return None
    rows = rows.assign(
        _panel=[f"{m} {d}" for m, d in zip(rows["model"], rows["dtype"])],
        _point=[
            f"b{int(b)} p{int(p)} L{int(n)}" + (f" r{int(r)}" if (r or 0) > 0 else "")
            for b, p, n, r in rows[[*POINT, "requests"]].itertuples(index=False)
        ],
    )
    order = rows.sort_values([*POINT, "requests"])["_point"].drop_duplicates()
    position = {p: i for i, p in enumerate(order)}
    panels = list(dict.fromkeys(rows["_panel"]))[:MAX_PANELS]
    variants = sorted(rows["variant"].unique(), key=rank)
    size = (max(WIDTH_PX / DPI, 0.9 * len(order) + 4), PANEL_HEIGHT_IN * len(panels))
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, layout="constrained", figsize=size)
    width = SPREAD / max(len(variants), 1)
    for ax, panel in zip(axes[:, 0], panels):
        for i, variant in enumerate(variants):
            points = rows[(rows["_panel"] == panel) & (rows["variant"] == variant)]
            if points.empty:
                continue
            color, marker = OKABE_ITO[i % len(OKABE_ITO)], MARKERS[i % len(MARKERS)]
            x = np.array([position[p] - SPREAD / 2 + (i + 0.5) * width for p in points["_point"]])
            ratio, low, high = (points[c].astype(float) for c in ("ratio", "ratio_low", "ratio_high"))
            error = [(ratio - low).clip(lower=0).fillna(0.0), (high - ratio).clip(lower=0).fillna(0.0)]
            ax.errorbar(x, ratio, yerr=error, color=color, linestyle="none", capsize=3, linewidth=1.3)
            hollow = points["marked"].astype(bool).to_numpy()
            for filled, mask in ((True, ~hollow), (False, hollow)):
                face, named = (color, True) if filled else ("white", hollow.all())  # hollow named only if all are
                style = dict(linestyle="none", marker=marker, markersize=7, color=color, markerfacecolor=face)
                ax.plot(x[mask], ratio[mask], **style, label=variant if named else None)
        ax.axhline(1.0, color="grey", linewidth=1, linestyle=":")
        ax.set(yscale="log", xlim=(-0.5, len(order) - 0.5), title=panel, ylabel="B / A runtime (log)")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=TICKS))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_xticks(range(len(order)), list(order))
        ax.grid(alpha=0.3)
    handles = {}
    for ax in axes[:, 0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=9)
    fig.suptitle(f"{title}\nbelow 1.0: B faster; error bars: 95% intervals; hollow: a side was noisy or contended")
    fig.savefig(out / FILE, dpi=DPI)
    plt.close(fig)
    return out / FILE
