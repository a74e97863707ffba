"""The comparison as Markdown and CSV: what differs first, then the overview, the ranking changes, one
row per matched point, and the points on one side only.

Column names in `comparison.csv` are the store's (`runtime_mean_s_a`, `useful_tokens_per_s_b`), each
side's figure with its side's suffix; the Markdown tables show the same figures under shorter headings.
"""

from __future__ import annotations

import datetime

import pandas as pd

from tokengen.contract.spec import WORKLOAD_FIELDS
from tracking.compare.overview import NOT_SURE, one_side_line, tokens_line
from tracking.compare.points import MATCH
from tracking.compare.sides import Side, first_line, same_environment
from tracking.measurement import MARK
from tracking.report.comparison import POINT, varying
from tracking.report.markdown import to_markdown

CONTEXT = [c for c in WORKLOAD_FIELDS if c not in POINT]
SHOWN = {
    "runtime_mean_s_a": "runtime A (s)",
    "runtime_mean_s_b": "runtime B (s)",
    "ratio": "B/A",
    "useful_tokens_per_s_a": "tokens/s A",
    "useful_tokens_per_s_b": "tokens/s B",
    "cost_per_mtok_a": "$/Mtok A",
    "cost_per_mtok_b": "$/Mtok B",
    "energy_j_per_token_a": "J/token A",
    "energy_j_per_token_b": "J/token B",
}
UNITS = {
    "runtime A (s)": "s",
    "runtime B (s)": "s",
    "B/A": "x",
    "tokens/s A": "rate",
    "tokens/s B": "rate",
    "$/Mtok A": "usd",
    "$/Mtok B": "usd",
    "J/token A": "g4",
    "J/token B": "g4",
}
CSV_FIRST = ["variant", *MATCH, "ratio", "ratio_low", "ratio_high", "verdict", "compared", "marked", "tokens"]
INTERNAL = ["_a", "_b"]

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


def interval_text(low: float, high: float) -> str:
    if pd.isna(low) or pd.isna(high):
        return ""
    return f"{low:.3f}-{high:.3f}"


def point_table(pairs: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """One row per matched point, as the Markdown shows it."""
    context = varying(pairs, [c for c in CONTEXT if c in columns])
    gpu = [c for c in ("gpu_type_a", "gpu_type_b") if "gpu_type" in columns or pairs[c].nunique(dropna=False) > 1]
    table = pairs.assign(interval=[interval_text(lo, hi) for lo, hi in zip(pairs["ratio_low"], pairs["ratio_high"])])
    table["B/A"] = [f"{r:.2f}x {MARK}" if m else r for r, m in zip(table["ratio"], table["marked"])]
    keep = (
        context
        + gpu
        + ["variant"]
        + POINT
        + [
            "runtime_mean_s_a",
            "runtime_mean_s_b",
            "B/A",
            "interval",
            "verdict",
            "useful_tokens_per_s_a",
            "useful_tokens_per_s_b",
            "cost_per_mtok_a",
            "cost_per_mtok_b",
            "energy_j_per_token_a",
            "energy_j_per_token_b",
            "tokens",
        ]
    )
    table = table[keep].rename(columns=SHOWN)
    table = table.dropna(axis=1, how="all")  # no energy counter, no price: no column
    if pairs.get("compile", pd.Series("", index=pairs.index)).astype(bool).any():
        table.insert(list(table.columns).index("verdict") + 1, "compile", pairs["compile"].to_numpy())
    if (pairs["compared"] == "step").any():
        table.insert(list(table.columns).index("verdict") + 1, "compared", pairs["compared"].to_numpy())
    table.attrs["unit"] = {c: u for c, u in UNITS.items() if c in table}
    return table.reset_index(drop=True)


def ranking_table(changes: pd.DataFrame) -> pd.DataFrame:
    """The swaps with only the workload fields that tell their points apart."""
    point = [c for c in ["gpu_type", *varying(changes, CONTEXT), *POINT] if c in changes]
    return changes[point + ["first", "second", "A", "B", "sure on both"]]


def csv_frame(pairs: pd.DataFrame) -> pd.DataFrame:
    rows = pairs.drop(columns=[c for c in INTERNAL if c in pairs])
    first = [c for c in CSV_FIRST if c in rows]
    return rows[first + [c for c in rows.columns if c not in first]]


def section(title: str, note: str, body: str) -> list[str]:
    return [f"## {title}", ""] + ([note, ""] if note else []) + [body, ""]


def render(
    a: Side,
    b: Side,
    found: pd.DataFrame,
    pairs: pd.DataFrame,
    columns: list[str],
    overview: pd.DataFrame,
    changes: pd.DataFrame,
    noise: int,
    only: pd.DataFrame,
    warning: str | None,
    plot_name: str | None,
) -> tuple[str, str]:
    """(comparison.md's text, what the command prints: what differs, the overview and the points)."""
    first = first_line(found)
    sides = [
        f"A: `{a.name}` in `{a.runs.uri}` (sweep run `{a.runs.parent_id}`, {len(a.runs.trials)} trials); "
        f"B: `{b.name}` in `{b.runs.uri}` (sweep run `{b.runs.parent_id}`, {len(b.runs.trials)} trials); "
        f"matched on {', '.join(columns)}.",
        "",
        f"A's {a.measurement_line()}",
        "",
        f"B's {b.measurement_line()}",
        "",
    ]
    shared = "Same on both: " + (same_environment(a, b) or "nothing known") + "."
    differ = section(
        "What differs between the two sides",
        shared,
        to_markdown(found) if not found.empty else "Nothing recorded differs.",
    )
    verdicts = pairs["verdict"].value_counts()
    counts = ", ".join(f"{int(n)} {v}" for v, n in verdicts.items())
    head = (
        [first, ""]
        + ([f"**{warning}**", ""] if warning else [])
        + [f"{len(pairs)} matched point(s): {counts}. {tokens_line(pairs)} {one_side_line(only)}", ""]
    )
    tables = section("Overview per variant", NOTES["overview"], to_markdown(overview)) + section(
        "B against A per point", NOTES["points"], to_markdown(point_table(pairs, columns))
    )
    swaps = to_markdown(ranking_table(changes)) if not changes.empty else "The variants rank alike on both sides."
    within = f" {noise} more swap(s) were within the noise on both sides and are not listed." if noise else ""
    ranking = section("Where the ranking differs", NOTES["ranking"] + within, swaps)
    lonely = section("On one side only", "", to_markdown(one_side_table(only))) if not only.empty else []
    built = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    text = (
        [f"# `{b.name}` against `{a.name}`", ""]
        + head
        + sides
        + [f"Built from MLflow {built}.", ""]
        + differ
        + tables
        + ranking
        + lonely
        + ([f"![B/A per point]({plot_name})", ""] if plot_name else [])
    )
    return "\n".join(text), "\n".join(head + differ + tables)


def one_side_table(only: pd.DataFrame) -> pd.DataFrame:
    """The points one side ran, with the fields that tell them apart (fixed ones dropped)."""
    frame = only[["side", "variant", *MATCH, "gpu_type", "status"]]
    keep = [
        c for c in frame.columns if c in ["side", "variant", *POINT, "status"] or frame[c].nunique(dropna=False) > 1
    ]
    return frame[keep].reset_index(drop=True)
