"""The sweep's headline point and its per-point table.

A big sweep has thousands of runs, a hundred to a page in the MLflow UI: one list of every point's runs
sorted by speedup mixes batch sizes, lengths, dtypes and GPU types. The view a report saves
(tracking/store/view.py) opens at one point instead, every variant side by side there; `points.csv`
holds every point, one row each, a column per variant.

The headline point is the one with the most variants compared (a speedup over its baseline), then
in the context (model, dtype, GPU type, ...) with the most finished trials, then the largest batch,
the longest max_seqlen and prompt: where the optimizations the sweep tried show most.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from tokengen.contract.names import FINISHED
from tracking.report.comparison import POINT, REPORT_MATCH, varying
from tracking.report.figures.baselines import as_float, key_part, match_keys
from tracking.report.figures.run_figures import DIGITS, rounded

CONTEXT = [c for c in REPORT_MATCH if c not in POINT]


@dataclass
class Headline:
    values: dict  # REPORT_MATCH field -> the point's value
    varying: list[str]  # the REPORT_MATCH fields the sweep's trials differ in: what pins the point down
    run_id: str  # one run at the point, whose stored params the view's filter quotes
    names: list[str] = field(default_factory=list)  # the run names at the point

    @property
    def label(self) -> str:
        """`b64 p128 L400`, then what else the sweep varies: `b64 p128 L400 bfloat16 H100`."""
        v = self.values
        point = [f"b{key_part(v['batch_size'])}", f"p{key_part(v['prompt_len'])}", f"L{key_part(v['max_seqlen'])}"]
        if key_part(v.get("requests")) not in ("", "0"):
            point.insert(0, f"r{key_part(v['requests'])}")
        return " ".join(point + [key_part(v[c]) for c in self.varying if c in CONTEXT and key_part(v[c])])


def _finished(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["in_sweep"].astype(bool) & (frame["status"] == FINISHED)]


def headline(frame: pd.DataFrame) -> Headline | None:
    """The sweep's headline point, or None when no trial finished."""
    mine = frame[frame["in_sweep"].astype(bool)]
    rows = _finished(frame)
    if rows.empty:
        return None
    compared = rows[[not math.isnan(as_float(s)) for s in rows["speedup"]]]
    rows = compared if not compared.empty else rows
    points = rows.assign(_point=match_keys(rows, REPORT_MATCH), _context=match_keys(rows, CONTEXT))
    per_context = points["_context"].value_counts()
    variants = points.groupby("_point")["variant"].nunique()
    sizes = [c for c in ("batch_size", "max_seqlen", "prompt_len") if c in points]
    firsts = points.drop_duplicates("_point")[["_point", "_context", *sizes]].to_dict("records")  # each point's first

    def score(first: dict) -> tuple:
        measured = tuple(as_float(first.get(c)) for c in ("batch_size", "max_seqlen", "prompt_len"))
        measured = tuple(-math.inf if math.isnan(s) else s for s in measured)
        return (variants[first["_point"]], per_context[first["_context"]], *measured)

    chosen = max(sorted(firsts, key=lambda first: first["_point"]), key=score)["_point"]  # ties: the lowest key
    best = points[points["_point"] == chosen].sort_values(["variant_rank", "variant"], kind="stable")
    first = best.iloc[0]
    names = [str(n) for n in best.get("run_name", pd.Series(dtype=object)).dropna()]
    return Headline({c: first.get(c) for c in REPORT_MATCH}, varying(mine, REPORT_MATCH), str(first["run_id"]), names)


def points_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """One row per point the sweep ran (its context where the sweep varies it, batch, prompt, length), one
    column per variant with its speedup there, then the fastest variant and its speedup; where any speedup is
    marked (tracking/report/marks.py), `marked` names the variants whose speedup at the point is."""
    rows = _finished(frame)
    if rows.empty:
        return None
    mine = frame[frame["in_sweep"].astype(bool)]
    index = [c for c in CONTEXT if c in rows and len(set(match_keys(mine, [c]))) > 1] + POINT
    variants = list(rows.sort_values(["variant_rank", "variant"])["variant"].drop_duplicates())
    keyed = rows.assign(
        _speedup=[as_float(s) for s in rows["speedup"]],
        _marked=rows["speedup_marked"].astype(float),
        **{c: [key_part(v) for v in rows[c]] for c in index},
    )
    table = keyed.pivot_table(index=index, columns="variant", values="_speedup", aggfunc="first", sort=False)
    table = table.reindex(columns=[v for v in variants if v in table.columns])
    marked = keyed.pivot_table(index=index, columns="variant", values="_marked", aggfunc="first", sort=False)
    marked = marked.reindex(index=table.index, columns=table.columns)
    if (marked == 1).any(axis=None):  # which speedups at the point carry the report's mark
        table["marked"] = [", ".join(v for v in table.columns if row[v] == 1) for _, row in marked.iterrows()]
    table = table.reset_index()
    for c in POINT:  # numbers sort as numbers
        table[c] = [_number(v) for v in table[c]]
    table = table.sort_values(index, kind="stable").reset_index(drop=True)
    speedups = table[[v for v in variants if v in table.columns and v != "marked"]]
    table["fastest"] = [row.idxmax() if row.notna().any() else None for _, row in speedups.iterrows()]
    table["fastest_speedup"] = speedups.max(axis=1, skipna=True)
    for column in [*speedups.columns, "fastest_speedup"]:
        table[column] = [rounded(v, DIGITS) if not math.isnan(v) else v for v in table[column]]
    if "marked" in table:
        table["marked"] = table.pop("marked")  # last, beside the fastest
    table.columns.name = None
    return table


def _number(text):
    """A point's value back as a number where it is one ("" stays None)."""
    number = as_float(text)
    if math.isnan(number):
        return None
    return int(number) if number.is_integer() else number
