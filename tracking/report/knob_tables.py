"""One table per knob a report compares with its own plain value (declared `beside=PLAIN`: the allocator, the
quantization, the attention kernel, and any knob declared so later): each trial at another value beside its twin
at the plain one, the workload and every other knob equal, with the ratio of their runtimes and its 95%
interval, the weight bytes each streamed, and the trial's token verdict (a gated one's fidelity; an exact one's
against its reference: tracking/report/figures/references.py). A runtime from a disturbed trial, and a ratio
from one, carry the mark. Request workloads are compared in the serving table instead.
"""

from __future__ import annotations

import pandas as pd

from tokengen.contract.declarations import PLAIN, knobs_except, knobs_where, plain
from tracking.report.comparison import POINT, REPORT_MATCH, finished, interval_text, varying
from tracking.report.figures.baselines import partners, stats_of
from tracking.report.figures.intervals import ratio_interval, significant
from tracking.report.marks import either, mark


def values_of(rows: pd.DataFrame, knob: str) -> pd.Series:
    """A knob's value per row, its plain value where a store older than the knob has none."""
    column = rows[knob] if knob in rows else pd.Series(None, index=rows.index, dtype=object)
    return column.where(column.notna() & (column.astype(str) != ""), plain(knob).name).astype(str)


def twinned(frame: pd.DataFrame, knob: str):
    """(the finished batch rows, the trials at a value of `knob` other than its plain one that have a plain twin,
    their twins on the same index, each pair's runtime ratio twin/trial with its interval text); None without a
    pair. The pairing every table of a knob against its plain value starts from."""
    rows = finished(frame)
    rows = rows[pd.to_numeric(rows.get("requests", 0), errors="coerce").fillna(0) <= 0]
    rows = rows.assign(**{knob: values_of(rows, knob)})
    mine, twins = rows[rows[knob] != plain(knob).name], rows[rows[knob] == plain(knob).name]
    found = partners(mine, twins, REPORT_MATCH + knobs_except(knob))
    mine = mine[found.notna()]
    if mine.empty:
        return None
    twin = twins.loc[list(found.dropna())].set_index(mine.index)
    ratios = []
    for base, own in zip(stats_of(twin), stats_of(mine)):
        low, high = ratio_interval(*base, *own)
        ratios.append((base[0] / own[0], interval_text(low, high, significant(low, high))))
    return rows, mine, twin, ratios


def pair_columns(frame: pd.DataFrame, knob: str, mine: pd.DataFrame, twin: pd.DataFrame, ratios: list) -> dict:
    """The columns every table of a knob against its plain value opens with (`twinned`'s pairs): the context, the
    value, both variants, both runtimes, their ratio and its interval."""
    return {
        **{c: mine[c] for c in varying(frame) + POINT},
        knob: mine[knob],
        "variant": mine["variant"],
        "plain_variant": twin["variant"],
        "runtime_mean_s": mine["runtime_mean_s"],
        "plain_runtime_mean_s": twin["runtime_mean_s"],
        "vs_plain": [r for r, _ in ratios],
        "interval": [i for _, i in ratios],
    }


def knob_table(frame: pd.DataFrame, knob: str) -> pd.DataFrame | None:
    """Trials with a value of `knob` other than its plain one, beside their plain twins (None without a pair)."""
    paired = twinned(frame, knob)
    if paired is None:
        return None
    _, mine, twin, ratios = paired
    table = pd.DataFrame(
        {
            **pair_columns(frame, knob, mine, twin, ratios),
            "weight_bytes": mine.get("weight_bytes"),
            "plain_weight_bytes": twin.get("weight_bytes"),
            "tokens": mine["tokens"],
        }
    ).reset_index(drop=True)
    table.attrs["unit"] = {"vs_plain": "x"}
    mark(table, "runtime_mean_s", mine["own_marked"])
    mark(table, "plain_runtime_mean_s", twin["own_marked"])
    return mark(table, "vs_plain", either(mine["own_marked"], twin["own_marked"]))


def knob_tables(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(knob, table) for every knob declared to be compared with its plain value that the sweep varied (a knob that
    changes how a generation advances has a table of its own: tracking/report/advance_tables.py)."""
    knobs = knobs_where(beside=PLAIN, advances=False)
    return [(knob, table) for knob in knobs if (table := knob_table(frame, knob)) is not None]
