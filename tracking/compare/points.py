"""Two sweeps matched on the knob and workload fields (not the trial key, which hashes the measurement settings too)
and, per point, B/A with the report's 95% interval, pyperf's verdict and whether the tokens agree."""

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
from tracking.report.figures.intervals import ratio_interval, significant
from tracking.report.figures.token_verdicts import agreed_steps
from tracking.rows import plain_rows
from tracking.store.reading import ReportError, fetch_artifacts, is_missing

MATCH = [*KNOBS, *WORKLOAD_FIELDS]
# B's interval wholly below 1.0, above it, holding it; or a side made fewer than two timed runs (a failed side says so)
VERDICTS = FASTER, SLOWER, NOT_SIGNIFICANT, NO_INTERVAL = ("faster", "slower", "not significant", "no interval")
SAME_TOKENS = "same"
NAMED = ("model", "dtype", "device", "variant")  # what each side ran, named where two sweeps share no point
FIGURES = ("runtime_mean_s", "useful_tokens_per_s", "cost_per_mtok", "energy_j_per_token")  # shown and recorded
PER_SIDE = (  # each side's fields in a pair's row, as <name>_a and <name>_b
    "run_id trial_key status measurement gpu_type steps runtime_mean_s runtime_std_s runtime_cv useful_tokens_per_s "
    "cost_per_mtok energy_j_per_token tokens_sha256 runs"
).split()


PAIR_READS = ("tokens_per_s", "device", "runs_done", "compile_cache")  # pair()'s other reads of a trial


def rank(variant) -> tuple[int, str]:
    """Preset order, then by name: the order every table lists variants in."""
    return (list(VARIANTS).index(variant) if variant in VARIANTS else len(VARIANTS), str(variant))


def stats(row: dict, suffix: str) -> tuple[float, float, int]:
    """(mean, std, runs) of one side's runtime in a pair's row, as ratio_interval takes them: a missing std is exact."""
    mean, std, runs = (as_float(row.get(name + suffix)) for name in ("runtime_mean_s", "runtime_std_s", "runs"))
    return mean, 0.0 if math.isnan(std) else std, 0 if math.isnan(runs) else int(runs)


def ratio_of(row: dict) -> dict:
    """B/A with its interval and verdict: of runtimes, or of time per step (`compared`) where the steps differ."""
    failed = [side for side in "AB" if row[f"status_{side.lower()}"] != FINISHED]
    (mean_a, std_a, runs_a), (mean_b, std_b, runs_b) = stats(row, "_a"), stats(row, "_b")
    if failed or not (mean_a > 0 and mean_b > 0):
        said = ("failed on " + ("both" if len(failed) == 2 else failed[0])) if failed else NO_INTERVAL
        return dict(ratio=math.nan, ratio_low=math.nan, ratio_high=math.nan, compared=None, verdict=said)
    steps = as_float(row["steps_b"]) / as_float(row["steps_a"])
    steps = steps if steps > 0 and steps != 1 else 1.0  # unknown steps: compare runs
    low, high = (bound / steps for bound in ratio_interval(mean_b, std_b, runs_b, mean_a, std_a, runs_a))
    sure = significant(low, high)
    said = NO_INTERVAL if sure is None else NOT_SIGNIFICANT if not sure else FASTER if high < 1.0 else SLOWER
    compared = "run" if steps == 1.0 else "step"
    return dict(ratio=mean_b / mean_a / steps, ratio_low=low, ratio_high=high, compared=compared, verdict=said)


def pair(a: dict, b: dict, side_a: Side, side_b: Side, columns: list[str]) -> dict:
    """One matched point: its fields (A's), each side's figures, B/A with interval and verdict, `marked` where a side
    judged its trial noisy or contended (left out of the means, as in the report), and `compile`: 'A cold, B warm'
    where one side's compile found its graphs in a cache and the other's did not (its first run is no measure)."""
    row = {name: a.get(name) for name in ["variant", *columns] if name != "gpu_type"}
    for suffix, trial, side in (("_a", a, side_a), ("_b", b, side_b)):
        useful = as_float(trial.get("useful_tokens_per_s"))
        useful = useful if useful > 0 else as_float(trial.get("tokens_per_s"))
        price = price_of(side.runs.settings.prices, trial.get("gpu_type"), trial.get("device"))
        own = {"useful_tokens_per_s": useful, "energy_j_per_token": as_float(trial.get("energy_j_per_token"))}
        own |= {"cost_per_mtok": price / 3600 / useful * 1e6 if useful > 0 else math.nan, "runs": timed_runs(trial)}
        row |= {name + suffix: own[name] if name in own else trial.get(name) for name in PER_SIDE}
    row |= ratio_of(row)
    unsure = speedup_unsure(a.get("measurement"), b.get("measurement")) and not math.isnan(row["ratio"])
    cache = [c if isinstance(c, str) and c else None for c in (a.get("compile_cache"), b.get("compile_cache"))]
    compiled = f"A {cache[0]}, B {cache[1]}" if all(cache) and cache[0] != cache[1] else ""
    return row | {"marked": bool(unsure), "compile": compiled}


def match(side_a: Side, side_b: Side) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(the pairs, one row per matched point in A's order; the points one side ran only, with a `side`
    column; the fields matched on: knobs and workload, and the GPU type where a side ran a point on several)."""
    a, b = side_a.runs.trials, side_b.runs.trials
    doubled = any(len(set(keys)) < len(keys) for keys in (match_keys(a, MATCH), match_keys(b, MATCH)))
    columns = MATCH + ["gpu_type"] if doubled else list(MATCH)
    keys_a, keys_b = match_keys(a, columns), match_keys(b, columns)
    first_b = dict(zip(reversed(keys_b), reversed(b.index)))  # each key's first trial on B
    first_a = pd.Series(keys_a, index=a.index).drop_duplicates()
    first_a = first_a[first_a.isin(list(first_b))]
    read = dict.fromkeys(["variant", *columns, *PER_SIDE, *PAIR_READS])  # what pair() reads of a trial
    dicts_a, dicts_b = (plain_rows(t, read) for t in (a, b))  # dicts, not a Series per row
    rows = [pair(dicts_a[label], dicts_b[first_b[key]], side_a, side_b, columns) for label, key in first_a.items()]
    pairs = pd.DataFrame(rows).assign(_a=list(first_a.index), _b=[first_b[key] for key in first_a])
    kept, matched = ["variant", *MATCH, "gpu_type", "status"], set(first_a)
    only_a, only_b = a[[k not in first_b for k in keys_a]], b[[k not in matched for k in keys_b]]
    return pairs, pd.concat([only_a[kept].assign(side="A"), only_b[kept].assign(side="B")], ignore_index=True), columns


def tokens_verdicts(pairs: pd.DataFrame, side_a: Side, side_b: Side) -> pd.Series:
    """Per pair: `same` (equal checksums), `differ (agree k/N)` (every row's first k decode steps agree, from the
    two tokens.npy, fetched only where the checksums differ), `differ (no tokens.npy)`, or `n/a` without a checksum.
    Across machines float32 may round differently, so a difference is reported, not judged."""
    known = pairs[["tokens_sha256_a", "tokens_sha256_b"]].notna().all(axis=1)
    differ = pairs[known & (pairs["tokens_sha256_a"] != pairs["tokens_sha256_b"])]
    tokens = []
    for side, column in ((side_a, "_a"), (side_b, "_b")):
        found = fetch_artifacts(side.runs.client, side.runs.trials, differ[column], TOKENS_FILE, np.load)
        tokens.append([found.get(run) for run in side.runs.trials.loc[differ[column], "run_id"].tolist()])
    said = dict(zip(pairs.index, [SAME_TOKENS if k else "n/a" for k in known.tolist()]))
    for i, got_a, got_b, prompt in zip(differ.index, *tokens, differ["prompt_len"].tolist()):
        if got_a is None or got_b is None:
            said[i] = "differ (no tokens.npy)"
        else:  # tokens are (batch, prompt + steps)
            prompt = 1 if is_missing(prompt) else int(prompt)
            steps = max(got_a.shape[1], got_b.shape[1]) - prompt
            said[i] = f"differ (agree {agreed_steps(got_a, got_b, prompt)}/{steps})"
    return pd.Series(said, index=pairs.index)


def compare(side_a: Side, side_b: Side) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """match's, the pairs with their `tokens` and in the tables' order; a ReportError where no point matched."""
    pairs, only, columns = match(side_a, side_b)
    if pairs.empty:
        ran = {c: [", ".join(sorted({str(v) for v in s.runs.trials[c]})) for s in (side_a, side_b)] for c in NAMED}
        named = "; ".join(f"{c} {on_a} vs {on_b}" for c, (on_a, on_b) in ran.items() if on_a != on_b)
        common = f"{side_a.name} and {side_b.name} have no point in common (same knobs and workload)"
        raise ReportError(f"{common}{': ' + named if named else ''}: compare two sweeps of the same grid")
    pairs["tokens"] = tokens_verdicts(pairs, side_a, side_b)
    order = varying(pairs, [c for c in WORKLOAD_FIELDS if c not in POINT]) + POINT + ["variant"]
    pairs = pairs.sort_values(order, key=lambda c: c.map(rank) if c.name == "variant" else c, kind="stable")
    return pairs.reset_index(drop=True), only, columns
