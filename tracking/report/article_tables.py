"""The article's questions, one table each, over a sweep's trials as tracking/report/comparison.py
prepares them (each trial's baseline, speedup and token verdict); the overview is in tracking/report/overview.py,
the cost and per-GPU tables in tracking/report/gpu_tables.py. Each table function returns None when the sweep
lacks the rows it needs, so a report shows only the questions its sweep can answer. Tables keep
MLflow's column names, so a figure in a report is the metric of the same name in the MLflow UI; a figure
from a disturbed trial, or derived from one, carries the mark (tracking/report/marks.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tokengen.contract.declarations import BOUND, LAGGED, REFERENCE, in_family
from tokengen.contract.names import FINISHED, TRIAL_KEY
from tracking.report.comparison import (
    KNOB_MATCH,
    POINT,
    PROFILE,
    finished,
    measurement_text,
    pick,
    speedup_unsure,
    varying,
)
from tracking.report.figures.baselines import match_keys, partners
from tracking.report.marks import either, mark


def runtime_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """(a) Runtime spread and speedup over the matching baseline, per trial, with the token verdict."""
    rows = finished(frame)
    if rows.empty:
        return None
    columns = (
        varying(frame)
        + ["variant"]
        + POINT
        + [
            "steps",
            "runtime_mean_s",
            "runtime_cv",
            "ttft_s",
            "tpot_s",
            "tokens_per_s",
            "speedup",
            "interval",
            "compared",
            "vs_generate",
            "tokens",
            "env_vs_baseline",
            "first_run_s",
            "compile_cache",
        ]
    )
    table = pick(rows, columns)
    table = table.drop(columns=[c for c in ("vs_generate", "compile_cache") if table[c].isna().all()])
    if "compile_cache" not in table:  # the first run says what a compile cost only beside whether it was warm
        table = table.drop(columns=["first_run_s"])
    if not table["env_vs_baseline"].astype(bool).any():
        table = table.drop(columns=["env_vs_baseline"])
    disturbed = [speedup_unsure(m, b) for m, b in zip(rows["measurement"], rows["baseline_measurement"])]
    if any(disturbed):  # on a quiet machine the table has no measurement column
        table.insert(
            list(table.columns).index("tokens"),
            "measurement",
            [measurement_text(m, b) for m, b in zip(rows["measurement"], rows["baseline_measurement"])],
        )
    attempts = pd.to_numeric(rows["attempts"], errors="coerce").fillna(1).astype(int).to_numpy()
    if (attempts > 1).any():
        chosen = pd.to_numeric(rows["attempt"], errors="coerce").fillna(1).astype(int).to_numpy()
        table.insert(len(table.columns) - 1, "attempt", [f"{c} of {n}" for c, n in zip(chosen, attempts)])
    table.attrs["unit"] = {"runtime_cv": "pct100", "vs_generate": "x"}
    for column, flagged in (("runtime_mean_s", "own_marked"), ("speedup", "speedup_marked")):
        mark(table, column, rows[flagged])
    return mark(table, "vs_generate", rows["vs_generate_marked"])


def memory_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """(b) The CUDA caching allocator's peaks and the fragmentation between them (n/a on the CPU)."""
    rows = finished(frame)
    if rows.empty:
        return None
    memory = [
        "mem_allocated_peak_bytes",
        "mem_reserved_peak_bytes",
        "mem_fragmentation_bytes",
        "mem_fragmentation_pct",
        "peak_rss_bytes",
    ]
    table = pick(rows, varying(frame) + ["variant"] + POINT + memory)
    for column in memory:  # the peaks of a disturbed trial: measured beside whatever disturbed it
        mark(table, column, rows["own_marked"])
    return table


def seqlen_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """(c) Runtime against max_seqlen per variant, and the exponent of its growth with the decode steps
    taken: ~2 is the baseline's full recompute (O(N^2)), ~1 a cache's O(N). Steps, not max_seqlen: with a
    length distribution a batch may stop before max_seqlen, and a recompute costs what it recomputes."""
    rows = finished(frame).dropna(subset=["runtime_mean_s", "max_seqlen", "steps"])
    group_by = varying(frame) + ["variant", "batch_size"]
    lengths = sorted({int(n) for n in rows["max_seqlen"]})
    if len(lengths) < 2:
        return None
    rows = rows.assign(
        _group=match_keys(rows, group_by), _n=rows["max_seqlen"].astype(int), _marked=rows["own_marked"].astype(float)
    )
    grids = {
        value: rows.pivot_table(index="_group", columns="_n", values=value, aggfunc="first", sort=False).reindex(
            columns=lengths
        )
        for value in ("runtime_mean_s", "steps", "_marked")
    }
    runtime, steps = grids["runtime_mean_s"], grids["steps"].reindex(grids["runtime_mean_s"].index)
    marked = grids["_marked"].reindex(runtime.index)
    out = runtime.rename(columns={n: f"n={n}" for n in lengths})
    out = out[runtime.notna().sum(axis=1) >= 2]
    if out.empty:
        return None
    exponents, taken = [], []
    for group in out.index:
        seconds, count = runtime.loc[group].to_numpy(float), steps.loc[group].to_numpy(float)
        known = ~np.isnan(seconds) & ~np.isnan(count)
        distinct = len(set(count[known])) >= 2
        exponents.append(np.polyfit(np.log(count[known]), np.log(seconds[known]), 1)[0] if distinct else np.nan)
        taken.append(", ".join("-" if np.isnan(c) else str(int(c)) for c in count))
    out = out.assign(steps=taken, exponent=exponents)
    names = rows.drop_duplicates("_group").set_index("_group")[group_by]
    table = names.loc[out.index].join(out).reset_index(drop=True)
    table.attrs["unit"] = {f"n={n}": "s" for n in lengths}
    shown = marked.loc[out.index]
    for n in lengths:
        mark(table, f"n={n}", shown[n])
    return mark(table, "exponent", [bool((row == 1).any()) for _, row in shown.iterrows()])  # from every length


def _peer_table(frame: pd.DataFrame, checks: tuple[str, ...], peer_check: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Trials whose stop check is in `checks`, beside their peer with stop check `peer_check`."""
    rows = finished(frame)
    mine = rows[rows["stop_check"].isin(checks)]
    peers = rows[rows["stop_check"] == peer_check]
    found = partners(mine, peers, KNOB_MATCH)
    mine = mine[found.notna()]
    return mine, peers.loc[list(found.dropna())].set_index(mine.index)


def pipelining_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """(d) What hiding the host's stop check gains at each batch size: the reference (sync) variant
    beside its twins with a lagged check (same cache, compile, workload), every check the
    declarations put in the lagged family."""
    mine, sync = _peer_table(frame, in_family("stop_check", LAGGED), in_family("stop_check", REFERENCE)[0])
    if mine.empty:
        return None
    table = pd.DataFrame(
        {
            **{c: mine[c] for c in varying(frame) + POINT},
            "sync_variant": sync["variant"],
            "sync_runtime_mean_s": sync["runtime_mean_s"],
            "variant": mine["variant"],
            "runtime_mean_s": mine["runtime_mean_s"],
            "gain_pct": 100 * (sync["runtime_mean_s"] - mine["runtime_mean_s"]) / sync["runtime_mean_s"],
            "_mine": mine["own_marked"],
            "_sync": sync["own_marked"],
        }
    )
    order = varying(frame) + ["max_seqlen", "batch_size", "sync_variant"]
    table = table.sort_values(order, kind="stable").reset_index(drop=True)
    mine_marked, sync_marked = table.pop("_mine"), table.pop("_sync")
    mark(table, "sync_runtime_mean_s", sync_marked)
    mark(table, "runtime_mean_s", mine_marked)
    return mark(table, "gain_pct", either(mine_marked, sync_marked))


def nocheck_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """(e) What a stop check costs against the no-check upper bound with the same cache and compile,
    per decode step: a no-check run takes all max_seqlen steps, a checked one stops with its batch."""
    mine, bound = _peer_table(frame, in_family("stop_check", REFERENCE, LAGGED), in_family("stop_check", BOUND)[0])
    if mine.empty:
        return None
    table = pd.DataFrame(
        {
            **{c: mine[c] for c in varying(frame) + POINT},
            "variant": mine["variant"],
            "steps": mine["steps"],
            "step_ms": mine["step_ms"],
            "nocheck_variant": bound["variant"],
            "nocheck_steps": bound["steps"],
            "nocheck_step_ms": bound["step_ms"],
            "overhead_pct": 100 * (mine["step_ms"] - bound["step_ms"]) / bound["step_ms"],
        }
    ).reset_index(drop=True)
    mark(table, "step_ms", mine["own_marked"])
    mark(table, "nocheck_step_ms", bound["own_marked"])
    return mark(table, "overhead_pct", either(mine["own_marked"], bound["own_marked"]))


def failed_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """(g) Every failed trial with what broke."""
    rows = frame[(frame["status"] != FINISHED) & frame["in_sweep"].astype(bool)]
    if rows.empty:
        return None
    if "error_message" in rows:
        rows = rows.assign(error_message=[m[:300] if isinstance(m, str) else m for m in rows["error_message"]])
    columns = ["variant", "model", "dtype", "device", "gpu_type"] + POINT + [TRIAL_KEY, "error_type", "error_message"]
    return pick(rows, columns)


def idle_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Where profiling measured it: the GPU's idle gap per step beside each variant's speedup."""
    present = [c for c in PROFILE if c in frame and frame[c].notna().any()]
    if not present:
        return None
    rows = finished(frame)
    rows = rows[rows[present].notna().any(axis=1)]
    table = mark(
        pick(rows, varying(frame) + ["variant"] + POINT + ["speedup"] + PROFILE), "speedup", rows["speedup_marked"]
    )
    for column in PROFILE:
        mark(table, column, rows["own_marked"])
    return table
