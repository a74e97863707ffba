"""What the matched points say together: per variant the geometric-mean ratio and how many points moved
beyond the noise, where the variants' ranking differs between the sides, and a warning where the two
ran other models or dtypes under the same variant names.

A ranking change is the scaling study's finding (pipelining pays at batch 1 on one GPU and not on the
other): at one workload, two variants in one order on A and the other on B. A swap within the noise
on both sides is no finding, so only swaps that one side at least is sure of are listed (each side's
pair judged by the report's interval, tracking/report/figures/intervals.py), the rest counted.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pandas as pd

from tokengen.contract.names import FINISHED
from tokengen.contract.spec import WORKLOAD_FIELDS
from tracking.compare.points import FASTER, NOT_SIGNIFICANT, SAME_TOKENS, SLOWER, rank
from tracking.measurement import MARK, OK, judged
from tracking.report.figures.baselines import as_float, key_part, match_keys
from tracking.report.figures.intervals import ratio_interval, significant

NOT_SURE = "~"  # beside a pair's ratio whose interval holds 1.0 (the report's mark)


def geomean(values) -> float:
    kept = [v for v in pd.to_numeric(pd.Series(values, dtype=object), errors="coerce") if v > 0]
    return math.exp(np.mean(np.log(kept))) if kept else math.nan


def overview(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per variant: matched points, the geometric mean, min and max of B/A over the points neither side
    judged noisy or contended (`left_out`: the others), and how many are faster, slower, not significant,
    and whose tokens differ."""
    rows = []
    for variant in sorted(pairs["variant"].unique(), key=rank):
        group = pairs[pairs["variant"] == variant]
        sure = group[~group["marked"].astype(bool)]
        ratios = [r for r in sure["ratio"] if r > 0]
        measured = int((group["ratio"] > 0).sum())
        rows.append(
            {
                "variant": variant,
                "points": len(group),
                "ratio_geomean": geomean(ratios),
                "ratio_min": min(ratios, default=math.nan),
                "ratio_max": max(ratios, default=math.nan),
                "faster": int((group["verdict"] == FASTER).sum()),
                "slower": int((group["verdict"] == SLOWER).sum()),
                "not_significant": int((group["verdict"] == NOT_SIGNIFICANT).sum()),
                "left_out": measured - len(ratios),
                "tokens_differ": int(group["tokens"].astype(str).str.startswith("differ").sum()),
            }
        )
    table = pd.DataFrame(rows)
    if not table.empty and not table["left_out"].any():
        table = table.drop(columns="left_out")
    table.attrs["unit"] = {"ratio_geomean": "x", "ratio_min": "x", "ratio_max": "x"}
    return table


def _ratio(group: dict, suffix: str, first, second) -> float:
    return float(group[second][f"runtime_mean_s_{suffix}"]) / float(group[first][f"runtime_mean_s_{suffix}"])


def _side_order(group: dict, suffix: str, first, second) -> tuple[float, bool | None]:
    """second's runtime over first's on one side, and whether its interval excludes 1.0."""
    one, two = group[first], group[second]
    low, high = ratio_interval(*(_stats(two, suffix) + _stats(one, suffix)))
    return float(two[f"runtime_mean_s_{suffix}"]) / float(one[f"runtime_mean_s_{suffix}"]), significant(low, high)


def _stats(row, suffix: str) -> tuple[float, float, int]:
    mean, std, runs = (as_float(row[f"{name}_{suffix}"]) for name in ("runtime_mean_s", "runtime_std_s", "runs"))
    return mean, 0.0 if math.isnan(std) else std, 0 if math.isnan(runs) else int(runs)


def _said(ratio: float, sure, unsure_measurement: bool) -> str:
    return f"{ratio:.2f}x" + ("" if sure else f" {NOT_SURE}") + (f" {MARK}" if unsure_measurement else "")


def _unsure(group: dict, suffix: str, *variants) -> bool:
    """Whether a side judged either variant's trial noisy or contended: its order there is suspect."""
    return any(judged(group[v].get(f"measurement_{suffix}")) not in (None, OK) for v in variants)


def ranking_changes(pairs: pd.DataFrame, columns: list[str]) -> tuple[pd.DataFrame, int]:
    """Per workload point (the workload fields, and the GPU type where it is matched on), each pair of
    variants whose order differs between A and B: `A` and `B` give the second variant's runtime over the
    first's on each side (below 1.0: the second is faster there; `~`: not significant; `!`: a trial of the
    pair was noisy or contended there). Returns the swaps
    at least one side is sure of, and how many swaps were within the noise on both sides."""
    workload = [c for c in columns if c in WORKLOAD_FIELDS or c == "gpu_type"]
    done = pairs[(pairs["status_a"] == FINISHED) & (pairs["status_b"] == FINISHED)]
    done = done[(pd.to_numeric(done["runtime_mean_s_a"]) > 0) & (pd.to_numeric(done["runtime_mean_s_b"]) > 0)]
    rows, noise = [], 0
    keyed = [f"{c}_a" if c == "gpu_type" else c for c in workload]  # a pair keeps each side's GPU type, matched equal
    for _, group in done.assign(_point=match_keys(done, keyed)).groupby("_point", sort=False):
        group = group.set_index("variant").to_dict("index")  # plain rows: a point's pairs of variants number ~1,000
        for first, second in combinations(sorted(group, key=rank), 2):
            on_a, on_b = (_ratio(group, suffix, first, second) for suffix in "ab")
            if (on_a < 1) == (on_b < 1) or on_a == 1 or on_b == 1:
                continue  # the same order on both sides: no interval needed (the t quantile costs ~0.1 ms)
            (_, sure_a), (_, sure_b) = (_side_order(group, suffix, first, second) for suffix in "ab")
            if not (sure_a or sure_b):
                noise += 1
                continue
            point = {c: group[first][k] for c, k in zip(workload, keyed) if k in group[first]}
            rows.append(
                {
                    **point,
                    "first": first,
                    "second": second,
                    "A": _said(on_a, sure_a, _unsure(group, "a", first, second)),
                    "B": _said(on_b, sure_b, _unsure(group, "b", first, second)),
                    "sure on both": bool(sure_a and sure_b),
                }
            )
    return pd.DataFrame(rows), noise


def models_warning(pairs: pd.DataFrame, only: pd.DataFrame) -> str | None:
    """A variant name that ran other models or dtypes on A than on B: its points cannot all match, and a
    user reading `kv_cache` on both sides would assume they could."""
    if only.empty:
        return None
    rows = pd.concat([pairs.assign(side="A"), pairs.assign(side="B"), only], ignore_index=True)
    named = []
    for variant in sorted(set(only["variant"]), key=rank):
        group = rows[rows["variant"] == variant]
        for field in ("model", "dtype"):
            seen = {s: sorted({key_part(v) for v in group.loc[group["side"] == s, field]}) for s in ("A", "B")}
            if seen["A"] and seen["B"] and seen["A"] != seen["B"]:
                named.append(f"{variant} ran {field} {', '.join(seen['A'])} on A and {', '.join(seen['B'])} on B")
    if not named:
        return None
    return (
        "Warning: the same variant names ran other models or dtypes on the two sides ("
        + "; ".join(named)
        + "): only the points both ran are compared; the rest are listed as on one side only."
    )


def one_side_line(only: pd.DataFrame) -> str:
    if only.empty:
        return "Every point of each side has its match on the other."
    counts = only["side"].value_counts()
    return (
        f"On one side only: {int(counts.get('A', 0))} point(s) of A, {int(counts.get('B', 0))} of B "
        "(listed at the end); they are in no ratio or mean."
    )


def tokens_line(pairs: pd.DataFrame) -> str:
    same = int((pairs["tokens"] == SAME_TOKENS).sum())
    differ = int(pairs["tokens"].astype(str).str.startswith("differ").sum())
    return (
        f"Tokens: {same} of {len(pairs)} matched points returned the same tokens on both sides"
        + (f", {differ} differ (column `tokens`: each row's first k of N decode steps agree)" if differ else "")
        + "."
    )
