"""What the matched points say together: per variant the mean ratio, where the variants rank otherwise on B than on A
(the scaling study's finding), and variant names that ran other models or dtypes on the two sides."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tokengen.contract.names import FINISHED
from tokengen.contract.spec import WORKLOAD_FIELDS
from tracking.compare.points import FASTER, NOT_SIGNIFICANT, SLOWER, rank, stats
from tracking.measurement import MARK
from tracking.report.comparison import speedup_unsure
from tracking.report.figures.baselines import key_part, match_keys
from tracking.report.figures.intervals import ratio_interval, significant
from tracking.rows import plain_rows

NOT_SURE = "~"  # beside a pair's ratio whose interval holds 1.0 (the report's mark)


def overview(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per variant: its points, the geometric mean, min and max of B/A over those neither side judged noisy or
    contended (`left_out`: the others), how many are faster, slower, not significant, and whose tokens differ."""
    rows = []
    for variant in sorted(pairs["variant"].unique(), key=rank):
        group = pairs[pairs["variant"] == variant]
        ratios = [r for r in group.loc[~group["marked"].astype(bool), "ratio"] if r > 0]
        geomean = math.exp(np.mean(np.log(ratios))) if ratios else math.nan
        low, high = min(ratios, default=math.nan), max(ratios, default=math.nan)
        row = dict(variant=variant, points=len(group), ratio_geomean=geomean, ratio_min=low, ratio_max=high)
        row |= {v.replace(" ", "_"): int((group["verdict"] == v).sum()) for v in (FASTER, SLOWER, NOT_SIGNIFICANT)}
        differ = int(group["tokens"].astype(str).str.startswith("differ").sum())
        rows.append(row | dict(left_out=int((group["ratio"] > 0).sum()) - len(ratios), tokens_differ=differ))
    table = pd.DataFrame(rows)
    if not table.empty and not table["left_out"].any():
        table = table.drop(columns="left_out")
    table.attrs["unit"] = {"ratio_geomean": "x", "ratio_min": "x", "ratio_max": "x"}
    return table


def ranking_changes(pairs: pd.DataFrame, columns: list[str]) -> tuple[pd.DataFrame, int]:
    """Per workload point (and GPU type where matched on it), each pair of variants in one order on A and the other
    on B, with the second's runtime over the first's on each side; and how many more swaps were within the noise."""
    workload = [c for c in columns if c in WORKLOAD_FIELDS or c == "gpu_type"]
    keyed = [f"{c}_a" if c == "gpu_type" else c for c in workload]  # a pair keeps each side's GPU type, matched equal
    done = pairs[(pairs["status_a"] == FINISHED) & (pairs["status_b"] == FINISHED)]
    done = done[(pd.to_numeric(done["runtime_mean_s_a"]) > 0) & (pd.to_numeric(done["runtime_mean_s_b"]) > 0)]
    read = [*keyed, *(f"{n}_{s}" for n in ("runtime_mean_s", "runtime_std_s", "runs", "measurement") for s in "ab")]
    done = done[["variant", *dict.fromkeys(c for c in read if c in done)]]  # of a pair's hundreds of columns
    rows, noise = [], 0
    for _, group in done.assign(_point=match_keys(done, keyed)).groupby("_point", sort=False):
        group = plain_rows(group.set_index("variant"))  # rows as dicts: a point's pairs of variants number ~1,000
        names = sorted(group, key=rank)
        runtimes = {s: np.array([float(group[n][f"runtime_mean_s_{s}"]) for n in names]) for s in "ab"}
        firsts, seconds = np.triu_indices(len(names), 1)  # every pair, in combinations' order
        on = {s: runtimes[s][seconds] / runtimes[s][firsts] for s in "ab"}
        swapped = ((on["a"] < 1) != (on["b"] < 1)) & (on["a"] != 1) & (on["b"] != 1)  # the others need no interval
        for i, j, on_a, on_b in zip(firsts[swapped], seconds[swapped], on["a"][swapped], on["b"][swapped]):
            first, second = names[i], names[j]
            one, two = group[first], group[second]
            on_a, on_b = float(on_a), float(on_b)
            sure_a, sure_b = (significant(*ratio_interval(*stats(two, s), *stats(one, s))) for s in ("_a", "_b"))
            if not (sure_a or sure_b):
                noise += 1
                continue
            row = {c: one[k] for c, k in zip(workload, keyed) if k in one} | {"first": first, "second": second}
            for s, ratio, sure in (("a", on_a, sure_a), ("b", on_b, sure_b)):
                unsure = speedup_unsure(one.get(f"measurement_{s}"), two.get(f"measurement_{s}"))
                row[s.upper()] = f"{ratio:.2f}x" + ("" if sure else f" {NOT_SURE}") + (f" {MARK}" if unsure else "")
            rows.append(row | {"sure on both": bool(sure_a and sure_b)})
    return pd.DataFrame(rows), noise


def models_warning(pairs: pd.DataFrame, only: pd.DataFrame) -> str | None:
    """Variant names that ran other models or dtypes on A than on B: their points cannot all match, though a reader
    seeing `kv_cache` on both sides would assume they could."""
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
        f"Warning: the same variant names ran other models or dtypes on the two sides ({'; '.join(named)}): only the "
        "points both ran are compared; the rest are listed as on one side only."
    )
