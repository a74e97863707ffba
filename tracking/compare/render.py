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
from tracking.compare.sides import Side, differences, first_line
from tracking.measurement import MARK
from tracking.report.comparison import POINT, varying
from tracking.report.markdown import to_markdown

CONTEXT = [c for c in WORKLOAD_FIELDS if c not in POINT]
HEADINGS = dict(
    zip(FIGURES, [("runtime {} (s)", "s"), ("tokens/s {}", "rate"), ("$/Mtok {}", "usd"), ("J/token {}", "g4")])
)
CSV_FIRST = ["variant", *MATCH, "ratio", "ratio_low", "ratio_high", "verdict", "compared", "marked", "tokens"]
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
    shown = {
        f"{name}_{s}": (heading.format(s.upper()), unit) for name, (heading, unit) in HEADINGS.items() for s in "ab"
    }
    figures = list(shown)
    table = pairs.assign(
        interval=[
            "" if pd.isna(lo) or pd.isna(hi) else f"{lo:.3f}-{hi:.3f}"
            for lo, hi in pairs[["ratio_low", "ratio_high"]].to_numpy()
        ],
        **{"B/A": [f"{r:.2f}x {MARK}" if m else r for r, m in zip(pairs["ratio"], pairs["marked"])]},
    )
    keep = [*context, *gpu, "variant", *POINT, *figures[:2], "B/A", "interval", "verdict", *figures[2:], "tokens"]
    table = table[keep].rename(columns={c: heading for c, (heading, _) in shown.items()})
    table = table.dropna(axis=1, how="all")  # no energy counter, no price: no column
    for column, wanted in (
        ("compile", pairs["compile"].astype(bool).any()),
        ("compared", (pairs["compared"] == "step").any()),
    ):
        if wanted:
            table.insert(list(table.columns).index("verdict") + 1, column, pairs[column].to_numpy())
    table.attrs["unit"] = {heading: unit for heading, unit in [*shown.values(), ("B/A", "x")] if heading in table}
    return table


def one_side_table(only: pd.DataFrame) -> pd.DataFrame:
    """The points one side ran, with the fields that tell them apart (fixed ones dropped)."""
    frame = only[["side", "variant", *MATCH, "gpu_type", "status"]]
    fixed = [c for c in MATCH + ["gpu_type"] if c not in POINT and frame[c].nunique(dropna=False) <= 1]
    return frame.drop(columns=fixed).reset_index(drop=True)


def csv_frame(pairs: pd.DataFrame) -> pd.DataFrame:
    rows = pairs.drop(columns=["_a", "_b"])
    first = [c for c in CSV_FIRST if c in rows]
    return rows[first + [c for c in rows.columns if c not in first]]


def section(title: str, note: str, body: str) -> list[str]:
    return [f"## {title}", *([note] if note else []), body]


def render(a: Side, b: Side, pairs: pd.DataFrame, only: pd.DataFrame, columns: list[str], plot: str | None):
    """(comparison.md's text; what the command prints: what differs, the overview and the points; its first line)."""
    found, shared = differences(a, b)
    warning = models_warning(pairs, only)
    counts = ", ".join(f"{int(n)} {v}" for v, n in pairs["verdict"].value_counts().items())
    same = int((pairs["tokens"] == SAME_TOKENS).sum())
    differ = int(pairs["tokens"].astype(str).str.startswith("differ").sum())
    tokens = f"Tokens: {same} of {len(pairs)} matched points returned the same tokens on both sides" + (
        f", {differ} differ (column `tokens`: each row's first k of N decode steps agree)" if differ else ""
    )
    on_one_side = only["side"].value_counts()
    lonely = (
        f"On one side only: {int(on_one_side.get('A', 0))} point(s) of A, {int(on_one_side.get('B', 0))} of B "
        "(listed at the end); they are in no ratio or mean."
        if len(only)
        else "Every point of each side has its match on the other."
    )
    head = [
        first_line(found),
        *([f"**{warning}**"] if warning else []),
        f"{len(pairs)} matched point(s): {counts}. {tokens}. {lonely}",
    ]
    sides = [
        f"A: `{a.name}` in `{a.runs.uri}` (sweep run `{a.runs.parent_id}`, {len(a.runs.trials)} trials); "
        f"B: `{b.name}` in `{b.runs.uri}` (sweep run `{b.runs.parent_id}`, {len(b.runs.trials)} trials); "
        f"matched on {', '.join(columns)}.",
        *(f"{side.label}'s {side.measurement_line()}" for side in (a, b)),
    ]
    what = to_markdown(found) if not found.empty else "Nothing recorded differs."
    tables = [
        *section("What differs between the two sides", f"Same on both: {shared or 'nothing known'}.", what),
        *section("Overview per variant", NOTES["overview"], to_markdown(overview(pairs))),
        *section("B against A per point", NOTES["points"], to_markdown(point_table(pairs, columns))),
    ]
    changes, noise = ranking_changes(pairs, columns)
    point = [c for c in ["gpu_type", *varying(changes, CONTEXT), *POINT] if c in changes]
    swaps = changes[point + ["first", "second", "A", "B", "sure on both"]] if not changes.empty else None
    within = f" {noise} more swap(s) were within the noise on both sides and are not listed." if noise else ""
    built = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    text = [
        f"# `{b.name}` against `{a.name}`",
        *head,
        *sides,
        f"Built from MLflow {built}.",
        *tables,
        *section(
            "Where the ranking differs",
            NOTES["ranking"] + within,
            "The variants rank alike on both sides." if swaps is None else to_markdown(swaps),
        ),
        *(section("On one side only", "", to_markdown(one_side_table(only))) if len(only) else []),
        *([f"![B/A per point]({plot})"] if plot else []),
    ]
    return "\n\n".join(text) + "\n", "\n\n".join(head + tables) + "\n", head[0]
