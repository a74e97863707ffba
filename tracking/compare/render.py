"""The comparison as Markdown and CSV: what differs first, then the overview, one row per matched point, the ranking
changes and the points on one side only. `comparison.csv` keeps the store's names with each side's suffix
(`runtime_mean_s_a`); the Markdown shows the same figures under shorter headings.
"""

from __future__ import annotations

import datetime

import pandas as pd

from tokengen.contract.spec import WORKLOAD_FIELDS
from tracking.compare.overview import NOT_SURE, models_warning, overview, ranking_changes
from tracking.compare.points import FIGURES, MATCH, SAME_TOKENS
from tracking.compare.sides import Side, differences
from tracking.measurement import MARK
from tracking.report.comparison import POINT, varying
from tracking.report.markdown import to_markdown

CONTEXT = [c for c in WORKLOAD_FIELDS if c not in POINT]
HEADINGS = dict(
    zip(FIGURES, [("runtime {} (s)", "s"), ("tokens/s {}", "rate"), ("$/Mtok {}", "usd"), ("J/token {}", "g4")])
)
CSV_FIRST = ["variant", *MATCH, "ratio", "ratio_low", "ratio_high", "verdict", "compared", "marked", "tokens"]
NOTHING_DIFFERS = "What differs: nothing the two sides recorded (same environment, same measurement settings)."
RANK_ALIKE = "The variants rank alike on both sides."
ALL_MATCHED = "Every point of each side has its match on the other."
NOTES = {
    "points": "B/A = B's mean runtime over A's at the same point (the same knobs and workload); below 1.0 B is "
    "faster. interval: its 95% interval (the report's: delta method on the log scale, Student t with "
    "Welch's degrees of freedom); verdict: faster or slower where the interval excludes 1.0, else not "
    f"significant. `compared` = `step` where the two took different numbers of steps (time per step "
    f"compared). {MARK}: a side's trial was judged noisy or contended; such a ratio is left out of the "
    "overview's means. tokens: `same` = equal checksums; `differ (agree k/N)`: every row's first k of N "
    "decode steps agree (float32 may round differently on another machine or version). Cost per million "
    "useful tokens at each sweep's own sweep.prices; J/token from NVML where it counted.",
    "overview": "Per variant over its matched points: the geometric mean, min and max of B/A (points a side judged "
    "noisy or contended left out: `left_out`), how many moved beyond the noise (faster, slower) and "
    "how many did not.",
    "ranking": "At one workload, two variants in one order on A and the other on B. A and B: the second's runtime "
    f"over the first's on each side (below 1.0: the second is faster there; {NOT_SURE}: its interval "
    f"holds 1.0; {MARK}: a trial of the pair was noisy or contended on that side, so its order there is "
    "suspect).",
}


def point_table(pairs: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """One row per matched point, as the Markdown shows it."""
    context = varying(pairs, [c for c in CONTEXT if c in columns])
    gpu = [c for c in ("gpu_type_a", "gpu_type_b") if "gpu_type" in columns or pairs[c].nunique(dropna=False) > 1]
    shown = {f"{name}_{s}": (head.format(s.upper()), unit) for name, (head, unit) in HEADINGS.items() for s in "ab"}
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


def csv_frame(pairs: pd.DataFrame) -> pd.DataFrame:
    rows = pairs.drop(columns=["_a", "_b"])
    first = [c for c in CSV_FIRST if c in rows]
    return rows[first + [c for c in rows.columns if c not in first]]


def section(title: str, body: str, note: str = "") -> list[str]:
    return [f"## {title}", *([note] if note else []), body]


def render(a: Side, b: Side, pairs: pd.DataFrame, only: pd.DataFrame, columns: list[str], plot: str | None):
    """(comparison.md's text; what the command prints: what differs, the overview and the points; its first line)."""
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
    head = [
        f"What differs: {differs}." if differs else NOTHING_DIFFERS,
        *([f"**{warning}**"] if warning else []),
        f"{len(pairs)} matched point(s): {counts}. {tokens} {lonely}",
    ]
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
    return "\n\n".join(text) + "\n", "\n\n".join(head + tables) + "\n", head[0]
