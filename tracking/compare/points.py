"""The matched points of two sweeps and, per point, B/A with its 95% interval, pyperf's verdict and the tokens' agreement.

A point is a setting of the spec's knob and workload fields, not a trial key: the key also hashes the measurement
settings, so `trial.runs=5` and `trial.runs=auto` would share none. The GPU type joins the match where a side ran a
point on several. B/A is the ratio of mean runtimes with the report's interval (tracking/report/figures/intervals.py),
of time per step where the two took different numbers of steps.
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
from tracking.report.figures.intervals import ratio_interval, significant
from tracking.report.figures.token_verdicts import agreed_steps
from tracking.store.reading import ReportError, fetch_artifacts, is_missing

MATCH = [*KNOBS, *WORKLOAD_FIELDS]
# B's interval wholly below 1.0, above it, holding it; or a side made fewer than two timed runs (a failed side says so)
VERDICTS = FASTER, SLOWER, NOT_SIGNIFICANT, NO_INTERVAL = ("faster", "slower", "not significant", "no interval")
SAME_TOKENS = "same"
FIGURES = ("runtime_mean_s", "useful_tokens_per_s", "cost_per_mtok", "energy_j_per_token")  # shown and recorded
PER_SIDE = (  # each side's fields in a pair's row, as <name>_a and <name>_b
    "run_id trial_key status measurement gpu_type steps runtime_mean_s runtime_std_s runtime_cv useful_tokens_per_s "
    "cost_per_mtok energy_j_per_token tokens_sha256 runs"
).split()


def rank(variant) -> tuple[int, str]:
    """Preset order, then by name: the order every table lists variants in."""
    return (list(VARIANTS).index(variant) if variant in VARIANTS else len(VARIANTS), str(variant))


def stats(row: dict, suffix: str = "") -> tuple[float, float, int]:
    """(mean, std, runs) of one side's runtime as ratio_interval takes them: a missing std counts as exact."""
    mean, std, runs = (as_float(row.get(name + suffix)) for name in ("runtime_mean_s", "runtime_std_s", "runs"))
    return mean, 0.0 if math.isnan(std) else std, 0 if math.isnan(runs) else int(runs)


def side_figures(trial: dict, prices: dict) -> dict:
    useful = as_float(trial.get("useful_tokens_per_s"))
    useful = useful if useful > 0 else as_float(trial.get("tokens_per_s"))
    price = price_of(prices, trial.get("gpu_type"), trial.get("device"))
    return {
        **{name: trial.get(name) for name in PER_SIDE},
        "useful_tokens_per_s": useful,
        "cost_per_mtok": price / 3600 / useful * 1e6 if useful > 0 else math.nan,
        "energy_j_per_token": as_float(trial.get("energy_j_per_token")),
        "runs": timed_runs(trial),
    }


def ratio_of(a: dict, b: dict) -> tuple[float, float, float, str | None]:
    """(B/A, low, high, compared): of runtimes (`run`), or of time per step (`step`) where the steps differ."""
    (mean_a, std_a, runs_a), (mean_b, std_b, runs_b) = stats(a), stats(b)
    if a["status"] != FINISHED or b["status"] != FINISHED or not (mean_a > 0 and mean_b > 0):
        return math.nan, math.nan, math.nan, None
    steps = as_float(b["steps"]) / as_float(a["steps"])
    steps = steps if steps > 0 and steps != 1 else 1.0  # unknown steps: compare runs
    low, high = ratio_interval(mean_b, std_b, runs_b, mean_a, std_a, runs_a)
    return mean_b / mean_a / steps, low / steps, high / steps, "run" if steps == 1.0 else "step"


def verdict(status_a, status_b, low: float, high: float) -> str:
    failed = [side for side, status in (("A", status_a), ("B", status_b)) if status != FINISHED]
    if failed:
        return "failed on " + ("both" if len(failed) == 2 else failed[0])
    sure = significant(low, high)
    return NO_INTERVAL if sure is None else NOT_SIGNIFICANT if not sure else FASTER if high < 1.0 else SLOWER


def compile_note(a, b) -> str:
    """'A cold, B warm' where one side's compile found its graphs in a cache and the other's did not: its
    first run (and a price built on it) is no measure of the other's."""
    a, b = (v if isinstance(v, str) and v else None for v in (a, b))
    return f"A {a}, B {b}" if a and b and a != b else ""


def pair(a: dict, b: dict, side_a: Side, side_b: Side, columns: list[str]) -> dict:
    """One matched point: its fields (A's), each side's figures, B/A with interval and verdict, and `marked`
    where a side judged its trial noisy or contended (left out of the means, as in the report)."""
    figures_a, figures_b = side_figures(a, side_a.runs.settings.prices), side_figures(b, side_b.runs.settings.prices)
    ratio, low, high, compared = ratio_of(figures_a, figures_b)
    return {
        **{name: a.get(name) for name in ["variant", *columns] if name != "gpu_type"},
        **{f"{name}_a": value for name, value in figures_a.items()},
        **{f"{name}_b": value for name, value in figures_b.items()},
        "ratio": ratio,
        "ratio_low": low,
        "ratio_high": high,
        "compared": compared,
        "verdict": verdict(a.get("status"), b.get("status"), low, high),
        "marked": bool(speedup_unsure(a.get("measurement"), b.get("measurement")) and not math.isnan(ratio)),
        "compile": compile_note(a.get("compile_cache"), b.get("compile_cache")),
    }


def match(side_a: Side, side_b: Side) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(the pairs, one row per matched point in A's order; the points one side ran only, with a `side`
    column; the fields matched on: knobs and workload, and the GPU type where a side ran a point on several)."""
    a, b = side_a.runs.trials, side_b.runs.trials
    doubled = any(len(set(keys)) < len(keys) for keys in (match_keys(a, MATCH), match_keys(b, MATCH)))
    columns = MATCH + ["gpu_type"] if doubled else list(MATCH)
    keys_a, keys_b = match_keys(a, columns), match_keys(b, columns)
    first_b = dict(zip(reversed(keys_b), reversed(b.index)))  # each key's first trial on B
    first_a: dict = {}
    for label, key in zip(a.index, keys_a):
        if key in first_b:
            first_a.setdefault(key, label)
    plain_a, plain_b = a.to_dict("index"), b.to_dict("index")  # a row Series per point costs seconds at thousands
    pairs = pd.DataFrame(
        [
            {**pair(plain_a[label], plain_b[first_b[key]], side_a, side_b, columns), "_a": label, "_b": first_b[key]}
            for key, label in first_a.items()
        ]
    )
    kept = ["variant", *MATCH, "gpu_type", "status", "trial_key"]
    only_a, only_b = a[[k not in first_b for k in keys_a]], b[[k not in first_a for k in keys_b]]
    return pairs, pd.concat([only_a[kept].assign(side="A"), only_b[kept].assign(side="B")], ignore_index=True), columns


def tokens_verdicts(pairs: pd.DataFrame, side_a: Side, side_b: Side) -> list[str]:
    """Per pair: `same` (equal checksums), `differ (agree k/N)` (every row's first k decode steps agree, from the
    two tokens.npy, fetched only where the checksums differ), `differ (no tokens.npy)`, or `n/a` without a checksum.
    Across machines float32 may round differently, so a difference is reported, not judged."""
    sha = pairs[["tokens_sha256_a", "tokens_sha256_b"]].to_numpy()
    differ = [label for label, (a, b) in zip(pairs.index, sha) if not (is_missing(a) or is_missing(b)) and a != b]
    tokens = []
    for side, column in ((side_a, "_a"), (side_b, "_b")):
        labels = list(pairs.loc[differ, column])
        found = fetch_artifacts(side.runs.client, side.runs.trials, labels, TOKENS_FILE, np.load)
        tokens.append({label: found.get(side.runs.trials.at[label, "run_id"]) for label in labels})
    said = []
    for (sha_a, sha_b), label_a, label_b, prompt_len in zip(sha, pairs["_a"], pairs["_b"], pairs["prompt_len"]):
        tokens_a, tokens_b = tokens[0].get(label_a), tokens[1].get(label_b)
        prompt = 1 if is_missing(prompt_len) else int(prompt_len)
        if is_missing(sha_a) or is_missing(sha_b):
            said.append("n/a")
        elif sha_a == sha_b:
            said.append(SAME_TOKENS)
        elif tokens_a is None or tokens_b is None:
            said.append("differ (no tokens.npy)")
        else:  # tokens are (batch, prompt + steps)
            steps = max(tokens_a.shape[1], tokens_b.shape[1]) - prompt
            said.append(f"differ (agree {agreed_steps(tokens_a, tokens_b, prompt)}/{steps})")
    return said


def compare(side_a: Side, side_b: Side) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """match's, the pairs with their `tokens` and in the tables' order; a ReportError where no point matched."""
    pairs, only, columns = match(side_a, side_b)
    if pairs.empty:
        raise no_common_point(side_a, side_b)
    pairs["tokens"] = tokens_verdicts(pairs, side_a, side_b)
    order = varying(pairs, [c for c in WORKLOAD_FIELDS if c not in POINT]) + POINT + ["variant"]
    pairs = pairs.sort_values(order, key=lambda c: c.map(rank) if c.name == "variant" else c, kind="stable")
    return pairs.reset_index(drop=True), only, columns


def no_common_point(a: Side, b: Side) -> ReportError:
    """Two sweeps that share no point: the line says what each ran, so the fix is plain."""

    def ran(side: Side, column: str) -> str:
        return ", ".join(sorted({str(v) for v in side.runs.trials[column]}))

    named = [
        f"{c} {ran(a, c)} vs {ran(b, c)}" for c in ("model", "dtype", "device", "variant") if ran(a, c) != ran(b, c)
    ]
    return ReportError(
        f"{a.name} and {b.name} have no point in common (same knobs and workload)"
        + (f": {'; '.join(named)}" if named else "")
        + ": compare two sweeps of the same grid"
    )
