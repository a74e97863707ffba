"""Matching each trial to its baseline (the same workload, variant `baseline`) and its speedup over it."""

from __future__ import annotations

import math

import pandas as pd

from tokengen.contract.names import FINISHED
from tokengen.contract.spec import WORKLOAD_FIELDS
from tracking.report.figures.intervals import ratio_interval, significant
from tracking.rows import plain_rows

MATCH = [*WORKLOAD_FIELDS, "accelerator_type"]
"""A trial's baseline runs the same workload (tokengen.contract.spec's workload fields) on the same GPU type."""


def key_part(value) -> str:
    """One field of a match key; built in Python, not pandas, so None, NaN and 4 vs 4.0 all key alike."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _parts(values: list) -> list[str]:
    """key_part of each value, computed once per distinct value (a sweep's columns repeat a few values
    thousands of times); keyed by type too, so True and 1 stay apart."""
    seen: dict = {}
    out = []
    for value in values:
        try:
            part = seen[(type(value), value)]
        except KeyError:
            part = seen[(type(value), value)] = key_part(value)
        except TypeError:  # unhashable: as it is
            part = key_part(value)
        out.append(part)
    return out


def distinct_keys(values: list) -> int:
    """How many match keys `values` make: key_part of each distinct (type, value) once, not of every row."""
    try:
        seen = {(type(value), value) for value in values}
    except TypeError:  # unhashable values: each as it is
        return len(set(_parts(values)))
    return len({key_part(value) for _, value in seen})


def match_keys(frame: pd.DataFrame, columns: list[str]) -> list[str]:
    present = [c for c in columns if c in frame]
    if not present:
        return [""] * len(frame)
    return ["|".join(row) for row in zip(*(_parts(frame[c].tolist()) for c in present))]


def partners(frame: pd.DataFrame, candidates: pd.DataFrame, columns: list[str]) -> pd.Series:
    """For each row of `frame`, the index label of the candidate row equal on `columns` (None without one)."""
    lookup = dict(zip(match_keys(candidates, columns), candidates.index))
    return pd.Series([lookup.get(k) for k in match_keys(frame, columns)], index=frame.index, dtype=object)


def baseline_of(frame: pd.DataFrame, baseline: str = "baseline", match: list[str] = MATCH) -> pd.Series:
    """Index label of each trial's matching finished baseline trial (None without one)."""
    status = frame["status"] if "status" in frame else pd.Series(FINISHED, index=frame.index)
    variant = frame["variant"] if "variant" in frame else pd.Series(None, index=frame.index, dtype=object)
    base = frame[(variant == baseline) & (status == FINISHED)]
    if "in_sweep" in base:  # the sweep's own baseline wins over one borrowed from another sweep
        base = base.sort_values("in_sweep", key=lambda s: s.astype(bool), kind="stable")
    return partners(frame, base, match)


def with_speedup(frame: pd.DataFrame, baseline: str = "baseline", match: list[str] = MATCH) -> pd.DataFrame:
    """Adds `speedup` over the matching baseline (NaN without one), its 95% interval (`speedup_low`,
    `speedup_high`, tracking/report/figures/intervals.py), `significant` (the interval excludes 1.0) and `compared`:
    `run` when both made the same number of tokens (`tokens_generated`, padding included; `steps` in a record
    without it), else `step`: a no-check run under a length distribution takes every step while its baseline
    stops with its batch, so only time per step (per token) compares like with like. A trial that makes its tokens
    in fewer steps (speculative decoding: several tokens per forward) made the same tokens: it is compared by run."""
    frame = frame.copy()
    for column in match + ["variant", "runtime_mean_s", "runtime_std_s", "runs", "steps"]:
        if column not in frame:
            frame[column] = None
    if "status" not in frame:
        frame["status"] = FINISHED
    base = baseline_of(frame, baseline, match)
    columns = {name: [] for name in ("speedup", "speedup_low", "speedup_high", "significant", "compared")}
    named = ("status", "runtime_mean_s", "runtime_std_s", "runs", "runs_done", "steps", "tokens_generated")
    wanted = [c for c in named if c in frame]
    rows = plain_rows(frame, wanted)  # dicts: a row Series per trial costs seconds at thousands of trials
    for label, b in base.items():
        row = rows[label]
        if b is None or row["status"] != FINISHED or not _positive(row["runtime_mean_s"]):
            for name, value in zip(columns, (math.nan, math.nan, math.nan, None, None)):
                columns[name].append(value)
            continue
        other = rows[b]
        per_step = _work(other) / _work(row)
        per_step = per_step if per_step > 0 and per_step != 1 else 1.0  # NaN steps: compare runs
        low, high = ratio_interval(*_stats(other), *_stats(row))
        columns["speedup"].append(other["runtime_mean_s"] / row["runtime_mean_s"] / per_step)
        columns["speedup_low"].append(low / per_step)
        columns["speedup_high"].append(high / per_step)
        columns["significant"].append(significant(low, high) if b != label else None)
        columns["compared"].append("run" if per_step == 1.0 else "step")
    for name, values in columns.items():
        frame[name] = pd.Series(
            values, index=frame.index, dtype=object if name in ("significant", "compared") else float
        )
    return frame


def _work(row: dict) -> float:
    """The tokens a trial made (padding included), or its steps where its record has no such figure."""
    made = as_float(row.get("tokens_generated"))
    return made if made > 0 else as_float(row["steps"])


def as_float(value) -> float:
    """A figure as a float, NaN where the store has none (None, text): arithmetic on it stays NaN."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _positive(value) -> bool:
    return as_float(value) > 0


def timed_runs(row) -> float:
    """The timed runs a trial made: `runs_done` (runs=auto decides it), else its `runs` (older records)."""
    done = as_float(row.get("runs_done"))
    return done if done > 0 else as_float(row.get("runs"))


def _stats(row) -> tuple[float, float, int]:
    """(mean, std, runs) of a trial's timed runs; a missing std counts as exact."""
    std = as_float(row["runtime_std_s"])
    runs = timed_runs(row)
    return float(row["runtime_mean_s"]), 0.0 if math.isnan(std) else std, 0 if math.isnan(runs) else int(runs)


def stats_of(rows: pd.DataFrame) -> list[tuple[float, float, int]]:
    """_stats of every row, read from dict records (a Series per row costs a thousand times more)."""
    columns = [c for c in ("runtime_mean_s", "runtime_std_s", "runs_done", "runs") if c in rows]
    return [_stats(record) for record in rows[columns].to_dict("records")]
