"""The matched points of two sweeps and, per point, B/A with its interval and verdict.

A point is a setting of the spec's knob and workload fields (their roles in
tokengen/contract/spec.py), not a trial key: the key also hashes the measurement settings, so the
same grid run with `trial.runs=5` and `trial.runs=auto` would share no key. Where a side ran one
point on several GPU types (a mixed cluster), the GPU type joins the match. B/A is the ratio of
mean runtimes with the report's 95% interval (tracking/report/figures/intervals.py: delta method, Welch's degrees
of freedom), or of time per step where the two took different numbers of steps; its verdict is
pyperf's: faster, slower, or not significant when the interval holds 1.0.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tokengen.contract.names import FINISHED, TOKENS_FILE
from tokengen.contract.spec import KNOBS, WORKLOAD_FIELDS
from tokengen.contract.variants import VARIANTS
from tracking.compare.sides import Side
from tracking.report.comparison import POINT, price_of, speedup_unsure, varying
from tracking.report.figures.baselines import as_float, match_keys, timed_runs
from tracking.report.figures.intervals import ratio_interval
from tracking.report.figures.token_verdicts import agreed_steps
from tracking.store.reading import fetch_artifacts, is_missing

MATCH = [*KNOBS, *WORKLOAD_FIELDS]
FASTER, SLOWER, NOT_SIGNIFICANT, NO_INTERVAL = "faster", "slower", "not significant", "no interval"
VERDICTS = (FASTER, SLOWER, NOT_SIGNIFICANT, NO_INTERVAL)
"""B against A: faster (B's interval wholly below 1.0), slower (above), not significant (it holds 1.0), no
interval (a side made fewer than two timed runs); a point that failed on a side says so instead."""
SAME_TOKENS = "same"
PER_SIDE = (
    "run_id",
    "trial_key",
    "status",
    "measurement",
    "gpu_type",
    "steps",
    "runtime_mean_s",
    "runtime_std_s",
    "runtime_cv",
    "useful_tokens_per_s",
    "cost_per_mtok",
    "energy_j_per_token",
    "tokens_sha256",
)
"""Each side's figures in a pair's row, as `<name>_a` and `<name>_b`."""


def match_columns(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """The fields a point is matched on: knobs and workload, and the GPU type where a side ran a point
    on more than one."""
    for frame in (a, b):
        keys = match_keys(frame, MATCH)
        if len(set(keys)) < len(keys):
            return MATCH + ["gpu_type"]
    return list(MATCH)


def _useful(row) -> float:
    useful = as_float(row.get("useful_tokens_per_s"))
    return useful if useful > 0 else as_float(row.get("tokens_per_s"))


def _side_figures(row, side: Side) -> dict:
    useful = _useful(row)
    price = price_of(side.prices, row.get("gpu_type"), row.get("device"))
    figures = {name: row.get(name) for name in PER_SIDE}
    figures.update(
        useful_tokens_per_s=useful,
        cost_per_mtok=price / 3600 / useful * 1e6 if useful > 0 else math.nan,
        energy_j_per_token=as_float(row.get("energy_j_per_token")),
        runs=timed_runs(row),
    )
    return figures


def _stats(row) -> tuple[float, float, int]:
    std, runs = as_float(row.get("runtime_std_s")), timed_runs(row)
    return as_float(row.get("runtime_mean_s")), 0.0 if math.isnan(std) else std, 0 if math.isnan(runs) else int(runs)


def ratio_of(a, b) -> tuple[float, float, float, str | None]:
    """(B/A, low, high, compared): runtimes, or time per step (`step`) where the two took different steps."""
    if a.get("status") != FINISHED or b.get("status") != FINISHED:
        return math.nan, math.nan, math.nan, None
    (mean_a, std_a, runs_a), (mean_b, std_b, runs_b) = _stats(a), _stats(b)
    if not (mean_a > 0 and mean_b > 0):
        return math.nan, math.nan, math.nan, None
    steps = as_float(b.get("steps")) / as_float(a.get("steps"))
    steps = steps if steps > 0 and steps != 1 else 1.0  # unknown steps: compare runs
    low, high = ratio_interval(mean_b, std_b, runs_b, mean_a, std_a, runs_a)
    return mean_b / mean_a / steps, low / steps, high / steps, "run" if steps == 1.0 else "step"


def verdict(status_a, status_b, low: float, high: float) -> str:
    failed = [side for side, status in (("A", status_a), ("B", status_b)) if status != FINISHED]
    if failed:
        return "failed on " + (" and ".join(failed) if len(failed) == 1 else "both")
    if math.isnan(low) or math.isnan(high):
        return NO_INTERVAL
    return FASTER if high < 1.0 else SLOWER if low > 1.0 else NOT_SIGNIFICANT


def pair(a, b, side_a: Side, side_b: Side, columns: list[str]) -> dict:
    """One matched point: its fields (A's), each side's figures, B/A with interval and verdict, and
    `marked` where a side's trial was judged noisy or contended (left out of the means, as the report does)."""
    ratio, low, high, compared = ratio_of(a, b)
    row = {name: a.get(name) for name in ["variant", *columns] if name != "gpu_type"}
    for suffix, side, trial in (("a", side_a, a), ("b", side_b, b)):
        row.update({f"{name}_{suffix}": value for name, value in _side_figures(trial, side).items()})
    row.update(
        ratio=ratio,
        ratio_low=low,
        ratio_high=high,
        compared=compared,
        verdict=verdict(a.get("status"), b.get("status"), low, high),
        marked=bool(speedup_unsure(a.get("measurement"), b.get("measurement")) and not math.isnan(ratio)),
        compile=compile_note(a.get("compile_cache"), b.get("compile_cache")),
    )
    return row


def compile_note(a, b) -> str:
    """'A cold, B warm' where one side's compile found its graphs in a cache and the other's did not: its
    first run (and a price built on it) is no measure of the other's."""
    a, b = (v if isinstance(v, str) and v else None for v in (a, b))
    return f"A {a}, B {b}" if a and b and a != b else ""


def match(side_a: Side, side_b: Side) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(pairs: one row per matched point in A's order, one_side: the points only one side ran, with a
    `side` column, the match columns)."""
    a, b = side_a.runs.trials, side_b.runs.trials
    columns = match_columns(a, b)
    keys_a, keys_b = match_keys(a, columns), match_keys(b, columns)
    in_b: dict[str, object] = {}
    for label, key in zip(b.index, keys_b):
        in_b.setdefault(key, label)
    rows, seen = [], set()
    plain_a, plain_b = a.to_dict("index"), b.to_dict("index")  # a row Series per point costs seconds at thousands
    for label, key in zip(a.index, keys_a):
        if key in in_b and key not in seen:
            seen.add(key)
            rows.append(
                {**pair(plain_a[label], plain_b[in_b[key]], side_a, side_b, columns), "_a": label, "_b": in_b[key]}
            )
    pairs = pd.DataFrame(rows)
    only = [rows_of(a[[k not in in_b for k in keys_a]], "A"), rows_of(b[[k not in seen for k in keys_b]], "B")]
    return pairs, pd.concat(only, ignore_index=True), columns


def rows_of(frame: pd.DataFrame, side: str) -> pd.DataFrame:
    return frame[["variant", *MATCH, "gpu_type", "status", "trial_key"]].assign(side=side)


def check_tokens(pairs: pd.DataFrame, side_a: Side, side_b: Side) -> list[str]:
    """Per pair: `same` (equal checksums), `differ (agree k/N)` (every row's first k decode steps agree,
    from the two tokens.npy files, downloaded only for the pairs whose checksums differ), `differ (no
    tokens.npy)`, or `n/a` without a checksum. Across machines float32 may round differently, so a
    difference is reported, not judged."""
    differing = [i for i in pairs.index if _checksums_differ(pairs.loc[i])]
    files = []
    for side, column in ((side_a, "_a"), (side_b, "_b")):
        labels = list(pairs.loc[differing, column]) if differing else []
        found = fetch_artifacts(side.runs.client, side.runs.trials, labels, TOKENS_FILE, np.load)
        files.append({label: found.get(side.runs.trials.at[label, "run_id"]) for label in labels})
    verdicts = []
    for i, row in pairs.iterrows():
        sha_a, sha_b = row["tokens_sha256_a"], row["tokens_sha256_b"]
        if is_missing(sha_a) or is_missing(sha_b):
            verdicts.append("n/a")
        elif sha_a == sha_b:
            verdicts.append(SAME_TOKENS)
        else:
            verdicts.append(_differ(files[0].get(row["_a"]), files[1].get(row["_b"]), row.get("prompt_len")))
    return verdicts


def _checksums_differ(row) -> bool:
    sha_a, sha_b = row["tokens_sha256_a"], row["tokens_sha256_b"]
    return not (is_missing(sha_a) or is_missing(sha_b)) and sha_a != sha_b


def _differ(tokens_a, tokens_b, prompt_len) -> str:
    if tokens_a is None or tokens_b is None:
        return "differ (no tokens.npy)"
    prompt = 1 if is_missing(prompt_len) else int(prompt_len)
    steps = max(tokens_a.shape[1], tokens_b.shape[1]) - prompt  # (B, P + steps) each
    return f"differ (agree {agreed_steps(tokens_a, tokens_b, prompt)}/{steps})"


def compare(side_a: Side, side_b: Side) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The matched points with their tokens verdict (`tokens`), the points on one side only, the match columns."""
    pairs, only, columns = match(side_a, side_b)
    if not pairs.empty:
        pairs["tokens"] = check_tokens(pairs, side_a, side_b)
        order = varying(pairs, [c for c in WORKLOAD_FIELDS if c not in POINT]) + POINT
        pairs = pairs.assign(_rank=[rank(v) for v in pairs["variant"]]).sort_values(order + ["_rank"], kind="stable")
        pairs = pairs.drop(columns="_rank").reset_index(drop=True)
    return pairs, only, columns


def rank(variant) -> tuple[int, str]:
    """Preset order, then by name: the order every table lists variants in."""
    return (list(VARIANTS).index(variant) if variant in VARIANTS else len(VARIANTS), str(variant))
