"""The article's questions, one table each, over a sweep's trials as tracking/report/comparison.py
prepares them (each trial's baseline, speedup and token verdict). Each table function returns None when the sweep
lacks the rows it needs, so a report shows only the questions its sweep can answer. Tables keep
MLflow's column names, so a figure in a report is the metric of the same name in the MLflow UI.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tokengen.contract.declarations import BOUND, EQUIVALENT, LAGGED, LOSSY, REFERENCE, in_family
from tokengen.contract.fidelity import BELOW_GATE
from tokengen.contract.names import FINISHED
from tracking.measurement import MARK
from tracking.report.comparison import KNOB_MATCH, POINT, PROFILE, finished, measurement_text, pick, varying
from tracking.report.figures.baselines import match_keys, partners


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
    marked = rows["speedup_marked"].astype(bool).to_numpy()
    if marked.any():  # on a quiet machine the table is as it always was
        table["speedup"] = [f"{s:.2f}x {MARK}" if m else s for s, m in zip(table["speedup"], marked)]
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
    return table


def overview_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Per variant: how many trials, the speedup's geometric mean and range, token verdicts in one word."""
    rows = frame[frame["in_sweep"].astype(bool)]
    if rows.empty:
        return None
    out = []
    for variant, group in rows.sort_values(["variant_rank", "variant"]).groupby("variant", sort=False):
        done = group[group["status"] == FINISHED]
        measured = [s for s in done["speedup"] if isinstance(s, float) and s > 0 and not math.isnan(s)]
        sure = done[~done["speedup_marked"].astype(bool)]
        speedups = [s for s in sure["speedup"] if isinstance(s, float) and s > 0 and not math.isnan(s)]
        unsure = int((done["significant"] == False).sum())  # noqa: E712 - None (no interval) is not False
        verdicts = [v for v in done["tokens"] if v]
        bad = sum(v.startswith("MISMATCH") for v in verdicts)
        drift = sum(v.startswith(("agree", "differs")) for v in verdicts)
        words = [f"{bad} MISMATCH"] * bool(bad) + [f"{drift} drift"] * bool(drift)
        words += [
            f"{n} {kind}"
            for kind in (BELOW_GATE, EQUIVALENT, LOSSY)
            if (n := sum(v.startswith(kind) for v in verdicts))
        ]
        out.append(
            {
                "variant": variant,
                "finished": len(done),
                "failed": len(group) - len(done),
                "speedup_geomean": math.exp(np.mean(np.log(speedups))) if speedups else float("nan"),
                "speedup_min": min(speedups, default=float("nan")),
                "speedup_max": max(speedups, default=float("nan")),
                "not_significant": unsure,
                "left_out": len(measured) - len(speedups),
                "vs_generate_geomean": _geomean(sure["vs_generate"]),
                "tokens": ", ".join(words) or ("ok" if verdicts else ""),
            }
        )
    table = pd.DataFrame(out)
    if not table["left_out"].any():  # nothing marked: the overview is as it always was
        table = table.drop(columns="left_out")
    if table["vs_generate_geomean"].isna().all():
        table = table.drop(columns="vs_generate_geomean")
    table.attrs["unit"] = {"speedup_geomean": "x", "speedup_min": "x", "speedup_max": "x", "vs_generate_geomean": "x"}
    return table


def _geomean(values) -> float:
    kept = [v for v in pd.to_numeric(values, errors="coerce") if v > 0]
    return math.exp(np.mean(np.log(kept))) if kept else float("nan")


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
    columns = varying(frame) + ["variant"] + POINT + memory
    return pick(rows, columns)


def seqlen_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """(c) Runtime against max_seqlen per variant, and the exponent of its growth with the decode steps
    taken: ~2 is the baseline's full recompute (O(N^2)), ~1 a cache's O(N). Steps, not max_seqlen: with a
    length distribution a batch may stop before max_seqlen, and a recompute costs what it recomputes."""
    rows = finished(frame).dropna(subset=["runtime_mean_s", "max_seqlen", "steps"])
    group_by = varying(frame) + ["variant", "batch_size"]
    lengths = sorted({int(n) for n in rows["max_seqlen"]})
    if len(lengths) < 2:
        return None
    rows = rows.assign(_group=match_keys(rows, group_by), _n=rows["max_seqlen"].astype(int))
    grids = {
        value: rows.pivot_table(index="_group", columns="_n", values=value, aggfunc="first", sort=False).reindex(
            columns=lengths
        )
        for value in ("runtime_mean_s", "steps")
    }
    runtime, steps = grids["runtime_mean_s"], grids["steps"].reindex(grids["runtime_mean_s"].index)
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
    return table


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
        }
    )
    order = varying(frame) + ["max_seqlen", "batch_size", "sync_variant"]
    return table.sort_values(order, kind="stable").reset_index(drop=True)


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
    )
    return table.reset_index(drop=True)


COST = {"useful_tokens_per_s": "tokens/s", "cost_per_mtok": "$/Mtok", "energy_j_per_token": "J/token"}


def cost_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Useful tokens/s, cost per million useful tokens (the sweep's sweep.prices) and NVML joules per
    useful token, per trial, where a price or an energy figure is known."""
    rows = finished(frame)
    known = rows[rows["cost_per_mtok"].notna() | pd.to_numeric(rows.get("energy_j_per_token"), errors="coerce").notna()]
    if known.empty:
        return None
    table = pick(known, varying(frame) + ["variant"] + POINT + ["gpu_type", "price_per_hour", *COST])
    table.attrs["unit"] = {"price_per_hour": "usd", "cost_per_mtok": "usd", "energy_j_per_token": "g4"}
    return table


def gpu_cost_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Per GPU type side by side: tokens/s, cost per million tokens and joules per token of each trial
    that ran on two types or more (the scaling study's question: which GPU serves tokens cheapest)."""
    rows = finished(frame)
    gpus = sorted({g for g in rows["gpu_type"] if isinstance(g, str)})
    if len(gpus) < 2:
        return None
    index = [c for c in varying(frame) if c != "gpu_type"] + ["variant"] + POINT
    parts = []
    for value, short in COST.items():
        pivot = rows.pivot_table(
            index=index, columns="gpu_type", values=value, aggfunc="first", sort=False, dropna=False
        )
        parts.append(pivot.reindex(columns=gpus).rename(columns=lambda g, short=short: f"{g} {short}"))
    table = pd.concat(parts, axis=1)
    table = table[table[[f"{g} tokens/s" for g in gpus]].notna().sum(axis=1) >= 2]
    if table.empty:
        return None
    table = table[[f"{g} {short}" for g in gpus for short in COST.values()]].dropna(axis=1, how="all").reset_index()
    table.attrs["unit"] = {
        c: {"tokens/s": "rate", "$/Mtok": "usd", "J/token": "g4"}[c.split(" ", 1)[1]] for c in table.columns if " " in c
    }
    return table


def gpu_tables(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(f) The same trials side by side per GPU type, when the sweep ran some on more than one."""
    rows = finished(frame)
    gpus = sorted({g for g in rows["gpu_type"] if isinstance(g, str)})
    if len(gpus) < 2:
        return []
    index = [c for c in varying(frame) if c != "gpu_type"] + ["variant"] + POINT
    out = []
    for value in ("runtime_mean_s", "speedup", "tokens_per_s"):
        pivot = rows.pivot_table(index=index, columns="gpu_type", values=value, aggfunc="first", sort=False)
        pivot = pivot.reindex(columns=gpus)
        pivot = pivot[pivot.notna().sum(axis=1) >= 2].reset_index()  # only trials run on two types or more
        if pivot.empty:
            return []
        pivot.columns = [str(c) for c in pivot.columns]
        pivot.attrs["unit"] = {g: {"runtime_mean_s": "s", "speedup": "x", "tokens_per_s": "rate"}[value] for g in gpus}
        out.append((value, pivot))
    return out


def failed_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """(g) Every failed trial with what broke."""
    rows = frame[(frame["status"] != FINISHED) & frame["in_sweep"].astype(bool)]
    if rows.empty:
        return None
    if "error_message" in rows:
        rows = rows.assign(error_message=[m[:300] if isinstance(m, str) else m for m in rows["error_message"]])
    columns = ["variant", "model", "dtype", "device", "gpu_type"] + POINT + ["trial_key", "error_type", "error_message"]
    return pick(rows, columns)


def idle_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Where profiling measured it: the GPU's idle gap per step beside each variant's speedup."""
    present = [c for c in PROFILE if c in frame and frame[c].notna().any()]
    if not present:
        return None
    rows = finished(frame)
    rows = rows[rows[present].notna().any(axis=1)]
    return pick(rows, varying(frame) + ["variant"] + POINT + ["speedup"] + PROFILE)
