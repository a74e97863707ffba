"""The overview per variant, the first table a report and the sweep's run in MLflow show: how many trials,
the speedup's geometric mean and range, the geometric mean against generate(), the token verdicts in a
few words.

A marked speedup (its trial or baseline noisy or contended, its tokens below the gate or unchecked:
tracking/report/marks.py) stays out of a variant's figures while the variant has an unmarked one; where
every one is marked, the figures are the marked ones', carrying the mark, so a busy machine's overview
still says what it measured. `marked` counts the variant's trials with a marked figure.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tokengen.contract.declarations import EQUIVALENT, LOSSY
from tokengen.contract.fidelity import BELOW_GATE
from tokengen.contract.names import FINISHED
from tracking.report.figures.references import UNCHECKED, unproven
from tracking.report.marks import mark

SPEEDUPS = ("speedup_geomean", "speedup_min", "speedup_max")


def _figures(values, marked) -> tuple[list[float], bool]:
    """The positive values to summarize: the unmarked ones, else the marked ones (and True: they carry the mark)."""
    known = [(float(v), bool(m)) for v, m in zip(pd.to_numeric(values, errors="coerce"), marked) if v > 0]
    sure = [v for v, m in known if not m]
    return (sure, False) if sure else ([v for v, _ in known], bool(known))


def _geomean(values: list[float]) -> float:
    return math.exp(np.mean(np.log(values))) if values else float("nan")


def _tokens(verdicts: list[str]) -> str:
    """The verdicts in a few words: `2 MISMATCH, 1 drift, 1 unchecked`, else `ok`."""
    bad = sum(v.startswith("MISMATCH") for v in verdicts)
    drift = sum(v.startswith(("agree", "differs")) for v in verdicts)
    words = [f"{bad} MISMATCH"] * bool(bad) + [f"{drift} drift"] * bool(drift)
    words += [
        f"{n} {kind}" for kind in (BELOW_GATE, EQUIVALENT, LOSSY) if (n := sum(v.startswith(kind) for v in verdicts))
    ]
    unchecked = sum(unproven(v) for v in verdicts)
    words += [f"{unchecked} {UNCHECKED}"] * bool(unchecked)
    return ", ".join(words) or ("ok" if verdicts else "")


def overview_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Per variant: how many trials, the speedup's geometric mean and range, token verdicts in one word."""
    rows = frame[frame["in_sweep"].astype(bool)]
    if rows.empty:
        return None
    out, speedup_marks, generate_marks = [], [], []
    for variant, group in rows.sort_values(["variant_rank", "variant"]).groupby("variant", sort=False):
        done = group[group["status"] == FINISHED]
        speedups, speedup_marked = _figures(done["speedup"], done["speedup_marked"])
        ratios, generate_marked = _figures(done["vs_generate"], done["vs_generate_marked"])
        marked = done[["own_marked", "speedup_marked", "vs_generate_marked"]].astype(bool).any(axis=1)
        out.append(
            {
                "variant": variant,
                "finished": len(done),
                "failed": len(group) - len(done),
                "speedup_geomean": _geomean(speedups),
                "speedup_min": min(speedups, default=float("nan")),
                "speedup_max": max(speedups, default=float("nan")),
                "not_significant": int((done["significant"] == False).sum()),  # noqa: E712 - None is not False
                "marked": int(marked.sum()),
                "vs_generate_geomean": _geomean(ratios),
                "tokens": _tokens([v for v in done["tokens"] if v]),
            }
        )
        speedup_marks.append(speedup_marked)
        generate_marks.append(generate_marked)
    table = pd.DataFrame(out)
    if not table["marked"].any():  # nothing marked: the overview has no marked column
        table = table.drop(columns="marked")
    if table["vs_generate_geomean"].isna().all():
        table = table.drop(columns="vs_generate_geomean")
    table.attrs["unit"] = {"speedup_geomean": "x", "speedup_min": "x", "speedup_max": "x", "vs_generate_geomean": "x"}
    for column in SPEEDUPS:
        mark(table, column, speedup_marks)
    return mark(table, "vs_generate_geomean", generate_marks)
