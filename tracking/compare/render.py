"""The comparison's files: the Markdown (what differs first, then the overview and the points), the CSV (the store's
names with each side's suffix: `runtime_mean_s_a`) and the plot of B/A per point."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator  # noqa: I001 - after plots chose the backend

from tokengen.contract.spec import WORKLOAD_FIELDS
from tracking.compare.findings import NOT_SURE, models_warning, overview, ranking_changes
from tracking.compare.points import FIGURES, MATCH, SAME_TOKENS, rank
from tracking.compare.sides import Side, differences
from tracking.measurement import MARK
from tracking.report.comparison import POINT, varying
from tracking.report.markdown import to_markdown
from tracking.report.plots import DPI, MARKERS, MAX_LINES, MAX_PANELS, OKABE_ITO, PANEL_HEIGHT_IN, WIDTH_PX, plt

CONTEXT = [c for c in WORKLOAD_FIELDS if c not in POINT]
HEADINGS = dict(zip(FIGURES, ["runtime {} (s)", "tokens/s {}", "$/Mtok {}", "J/token {}"]))  # each side's, in the table
UNITS = dict(zip(FIGURES, ["s", "rate", "usd", "g4"]))  # as tracking/report/markdown.py formats them
CSV_FIRST = ["variant", *MATCH, "ratio", "ratio_low", "ratio_high", "verdict", "compared", "marked", "tokens"]
NOTHING_DIFFERS = "What differs: nothing the two sides recorded (same environment, same measurement settings)."
RANK_ALIKE = "The variants rank alike on both sides."
ALL_MATCHED = "Every point of each side has its match on the other."
FILE = "ratio_by_point.png"
SPREAD = 0.6  # of the distance between two points, shared by the variants drawn at each
TICKS = (1.0, 1.25, 1.6, 2.0, 2.5, 3.2, 4.0, 5.0, 6.4, 8.0)  # log-even steps, so a ratio near 1.0 still reads
NOTES = {
    "points": "B/A = B's mean runtime over A's at the same point (the same knobs and workload); below 1.0 B is faster. "
    "interval: its 95% interval (the report's: delta method on the log scale, Student t with Welch's degrees of "
    "freedom); verdict: faster or slower where the interval excludes 1.0, else not significant. `compared` = `step` "
    f"where the two took different numbers of steps (time per step compared). {MARK}: a side's trial was judged noisy "
    "or contended; such a ratio is left out of the overview's means. tokens: `same` = equal checksums; `differ (agree "
    "k/N)`: every row's first k of N decode steps agree (float32 may round differently on another machine or version). "
    "Cost per million useful tokens at each sweep's own sweep.prices; J/token from NVML where it counted.",
    "overview": "Per variant over its matched points: the geometric mean, min and max of B/A (points a side judged "
    "noisy or contended left out: `left_out`), how many moved beyond the noise (faster, slower) and how many did not.",
    "ranking": "At one workload, two variants in one order on A and the other on B. A and B: the second's runtime over "
    f"the first's on each side (below 1.0: the second is faster there; {NOT_SURE}: its interval holds 1.0; {MARK}: a "
    "trial of the pair was noisy or contended on that side, so its order there is suspect).",
}


def point_table(pairs: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """One row per matched point, as the Markdown shows it."""
    context = varying(pairs, [c for c in CONTEXT if c in columns])
    gpu = [c for c in ("gpu_type_a", "gpu_type_b") if "gpu_type" in columns or pairs[c].nunique(dropna=False) > 1]
    shown = {f"{name}_{s}": (HEADINGS[name].format(s.upper()), UNITS[name]) for name in FIGURES for s in "ab"}
    sided = list(shown)
    low_high = pairs[["ratio_low", "ratio_high"]].to_numpy()
    table = pairs.assign(interval=["" if pd.isna([lo, hi]).any() else f"{lo:.3f}-{hi:.3f}" for lo, hi in low_high])
    table["B/A"] = [f"{r:.2f}x {MARK}" if m else r for r, m in zip(pairs["ratio"], pairs["marked"])]
    wanted = {"compared": pairs["compared"] == "step", "compile": pairs["compile"].astype(bool)}  # shown if they say
    extra = [c for c, rows in wanted.items() if rows.any()]
    keep = [*context, *gpu, "variant", *POINT, *sided[:2], "B/A", "interval", "verdict", *extra, *sided[2:], "tokens"]
    table = table[keep].rename(columns={c: head for c, (head, _) in shown.items()})
    table = table.dropna(axis=1, how="all")  # no energy counter, no price: no column
    table.attrs["unit"] = {head: unit for head, unit in [*shown.values(), ("B/A", "x")] if head in table}
    return table


def section(title: str, body: str, note: str = "") -> list[str]:
    return [f"## {title}", *([note] if note else []), body]


def render(a: Side, b: Side, pairs: pd.DataFrame, only: pd.DataFrame, columns: list[str], plot: str) -> tuple[str, str]:
    """(comparison.md's text, `plot` the PNG's name or ""; what the command prints: differences, overview, points)."""
    found, shared = differences(a, b)
    differs = "; ".join(f"{r.fact} {r.A} vs {r.B}" for r in found.itertuples())
    warning = models_warning(pairs, only)
    counts = ", ".join(f"{n} {verdict}" for verdict, n in pairs["verdict"].value_counts().items())
    same, differ = (pairs["tokens"] == SAME_TOKENS).sum(), pairs["tokens"].astype(str).str.startswith("differ").sum()
    tokens = f"Tokens: {same} of {len(pairs)} matched points returned the same tokens on both sides"
    tokens += f", {differ} differ (column `tokens`: each row's first k of N decode steps agree)." if differ else "."
    sided = only["side"].value_counts()
    lonely = f"On one side only: {sided.get('A', 0)} point(s) of A, {sided.get('B', 0)} of B (listed at the end)"
    lonely = f"{lonely}; they are in no ratio or mean." if len(only) else ALL_MATCHED
    head = [f"What differs: {differs}." if differs else NOTHING_DIFFERS, *([f"**{warning}**"] if warning else [])]
    head.append(f"{len(pairs)} matched point(s): {counts}. {tokens} {lonely}")
    what = to_markdown(found) if differs else "Nothing recorded differs."
    tables = [
        *section("What differs between the two sides", what, f"Same on both: {shared or 'nothing known'}."),
        *section("Overview per variant", to_markdown(overview(pairs)), NOTES["overview"]),
        *section("B against A per point", to_markdown(point_table(pairs, columns)), NOTES["points"]),
    ]
    changes, noise = ranking_changes(pairs, columns)
    point = [c for c in ["gpu_type", *varying(changes, CONTEXT), *POINT] if c in changes]
    swaps = to_markdown(changes[point + ["first", "second", "A", "B", "sure on both"]]) if len(changes) else RANK_ALIKE
    within = f" {noise} more swap(s) were within the noise on both sides and are not listed." if noise else ""
    one_side = only[["side", "variant", *MATCH, "gpu_type", "status"]]
    fixed = [c for c in [*MATCH, "gpu_type"] if c not in POINT and one_side[c].nunique(dropna=False) <= 1]
    text = [
        f"# `{b.name}` against `{a.name}`",
        *head,
        f"A: `{a.name}` in `{a.runs.uri}` (sweep run `{a.runs.parent_id}`, {len(a.runs.trials)} trials); "
        f"B: `{b.name}` in `{b.runs.uri}` (sweep run `{b.runs.parent_id}`, {len(b.runs.trials)} trials); "
        f"matched on {', '.join(columns)}.",
        *(f"{side.label}'s {side.measurement_line()}" for side in (a, b)),
        f"Built from MLflow {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}.",
        *tables,
        *section("Where the ranking differs", swaps, NOTES["ranking"] + within),
        *(section("On one side only", to_markdown(one_side.drop(columns=fixed))) if len(only) else []),
        *([f"![B/A per point]({plot})"] if plot else []),
    ]
    return "\n\n".join(text) + "\n", "\n\n".join(head + tables) + "\n"


def moved_most(rows: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows of the MAX_LINES variants whose geometric mean B/A (over the points neither side judged noisy or
    contended, as the overview's) lies furthest from 1.0, all of them where there are no more; and the note that
    says so. Beyond a dozen the markers at a point cannot be told apart (the report's plots keep as many)."""
    variants = sorted(rows["variant"].unique(), key=rank)
    if len(variants) <= MAX_LINES:
        return rows, ""
    trusted = rows[~rows["marked"].astype(bool)]
    distance = np.log(trusted["ratio"].astype(float)).groupby(trusted["variant"]).mean().abs()
    kept = sorted(variants, key=lambda v: -distance.get(v, -1.0))[:MAX_LINES]  # stable: rank order among ties
    note = f"the {MAX_LINES} of {len(variants)} variants whose mean B/A is furthest from 1.0 (comparison.md: all)"
    return rows[rows["variant"].isin(kept)], note


def _with_ratio(pairs: pd.DataFrame) -> pd.DataFrame:
    return pairs[pd.to_numeric(pairs["ratio"], errors="coerce") > 0]


def has_ratio(pairs: pd.DataFrame) -> bool:
    """Whether ratio_plot draws anything: some matched point has a ratio."""
    return not _with_ratio(pairs).empty


def ratio_plot(pairs: pd.DataFrame, out: Path, title: str) -> Path | None:
    """Per variant, B/A with its 95% interval at each point, one panel per model and dtype, on a log axis centred on
    1.0, a point a side judged noisy or contended hollow; None where no matched point has a ratio."""
    rows = _with_ratio(pairs)
    if rows.empty:
        return None
    rows, shown = moved_most(rows)
    labels = [
        f"b{int(b)} p{int(p)} L{int(n)}" + (f" r{int(r)}" if (r or 0) > 0 else "")
        for b, p, n, r in rows[[*POINT, "requests"]].itertuples(index=False)
    ]
    rows = rows.assign(_panel=rows["model"].astype(str) + " " + rows["dtype"].astype(str), _point=labels)
    order = rows.sort_values([*POINT, "requests"])["_point"].drop_duplicates()
    position = {p: i for i, p in enumerate(order)}
    panels = list(dict.fromkeys(rows["_panel"]))[:MAX_PANELS]
    variants = sorted(rows["variant"].unique(), key=rank)
    drawn = dict(tuple(rows.groupby(["_panel", "variant"], sort=False)))
    size = (max(WIDTH_PX / DPI, 0.9 * len(order) + 4), PANEL_HEIGHT_IN * len(panels))
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, layout="constrained", figsize=size)
    width = SPREAD / max(len(variants), 1)
    for ax, panel in zip(axes[:, 0], panels):
        for i, variant in enumerate(variants):
            points = drawn.get((panel, variant))
            if points is None:
                continue
            color, marker = OKABE_ITO[i % len(OKABE_ITO)], MARKERS[i % len(MARKERS)]
            x = np.array([position[p] - SPREAD / 2 + (i + 0.5) * width for p in points["_point"]])
            ratio, low, high = (points[c].astype(float) for c in ("ratio", "ratio_low", "ratio_high"))
            error = [(ratio - low).clip(lower=0).fillna(0.0), (high - ratio).clip(lower=0).fillna(0.0)]
            ax.errorbar(x, ratio, yerr=error, color=color, linestyle="none", capsize=3, linewidth=1.3)
            hollow = points["marked"].astype(bool).to_numpy()
            for filled, mask in ((True, ~hollow), (False, hollow)):
                if not filled and not mask.any():
                    continue  # no hollow point: an empty line costs its drawing all the same
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
    key = "below 1.0: B faster; error bars: 95% intervals; hollow: a side was noisy or contended"
    fig.suptitle(f"{title}{'; ' + shown if shown else ''}\n{key}")
    fig.savefig(out / FILE, dpi=DPI)
    plt.close(fig)
    return out / FILE
