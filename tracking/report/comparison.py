"""What every table of a report compares against: each trial's matching baseline (same workload, same
GPU type), its speedup with its interval, its token verdict and its price, added by `prepare` to a
sweep's trials as the store's reader loads them (tracking/store/reading.py); and the columns a point
is matched on."""

from __future__ import annotations

import math

import pandas as pd

from tokengen.contract.declarations import KNOBS, PEER, SPECULATIVE, fidelity_of, in_family, knobs_except, plain
from tokengen.contract.fidelity import DEFAULT_GATE, below_gate, gated, speculative_verdict, verdict
from tokengen.contract.machine.fingerprint import differences, from_text
from tokengen.contract.machine.gpus import price_per_hour
from tokengen.contract.names import FINISHED
from tokengen.contract.variants import VARIANTS
from tokengen.measure.interference import NOISY_CV
from tracking.measurement import OK, judged
from tracking.report.figures.baselines import MATCH, as_float, baseline_of, distinct_keys, match_keys, with_speedup
from tracking.report.figures.references import references, unproven, verdicts_against
from tracking.report.figures.token_verdicts import check_tokens

REPORT_MATCH = [c if c != "accelerator_type" else "gpu_type" for c in MATCH]
"""MATCH with the GPU type read from Ray's accelerator_type, else the GPU's own name."""
CONTEXT = ["model", "dtype", "device", "gpu_type", "stop", "sampling", "seed"]
KNOB_MATCH = REPORT_MATCH + knobs_except("stop_check")
"""A stop check's peers: the same workload and every other knob, only the stop check differs."""
POINT = ["batch_size", "prompt_len", "max_seqlen"]
PROFILE = ["gpu_idle_us_per_step", "gpu_busy_pct", "host_sync_us_per_step"]
REQUIRED = (
    REPORT_MATCH
    + list(KNOBS)
    + [
        "variant",
        "status",
        "steps",
        "runtime_mean_s",
        "tokens_sha256",
        "run_id",
        "in_sweep",
        "useful_tokens_per_s",
        "top1_agreement",
        "fidelity_gate",
        "energy_j_per_token",
        "runtime_cv",
        "prompt_len",
        "measurement",
        "measurement_reasons",
        "attempt",
        "attempts",
    ]
)


def prepare(
    trials: pd.DataFrame, outside_baselines: pd.DataFrame | None = None, client=None, prices: dict | None = None
):
    """One frame for every table: the sweep's trials (plus other sweeps' baselines they match, marked
    in_sweep=False), with `speedup`, `tokens` (the verdict), `agreed_steps` and `step_ms`.
    Returns (frame, number of token files downloaded)."""
    parts = [trials.assign(in_sweep=True)]
    if outside_baselines is not None and not outside_baselines.empty:
        parts.append(outside_baselines.assign(in_sweep=False))
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
    for column in REQUIRED:
        if column not in frame:
            frame[column] = None
    if "cuda_graphs" in frame:  # a reduce-overhead trial whose graphs were skipped is not a CUDA-graph result
        skipped = frame["cuda_graphs"] == "skipped"
        frame.loc[skipped, "variant"] = frame.loc[skipped, "variant"].astype(str) + " (CUDA graphs skipped)"
    frame = with_speedup(frame, match=REPORT_MATCH)
    base = baseline_of(frame, match=REPORT_MATCH)
    in_sweep = frame["in_sweep"].to_dict()  # dicts below: frame.at per row costs seconds at this size
    frame["baseline_in_sweep"] = [b is None or bool(in_sweep[b]) for b in base]
    frame["env_vs_baseline"] = env_vs_baseline(frame, base)
    held = gated_rows(frame)
    reference, kind, unchecked = references(frame, base, row_knobs(frame), REPORT_MATCH)
    frame["tokens"], frame["agreed_steps"], downloads = check_tokens(frame, reference.where(~held, None), client)
    frame["tokens"], frame["tokens_reference"] = verdicts_against(
        frame["tokens"], reference, kind, unchecked.where(~held, ""), frame["variant"]
    )
    frame.loc[held, "tokens"] = fidelity_verdicts(frame[held])
    runtime, steps = (pd.to_numeric(frame[c], errors="coerce") for c in ("runtime_mean_s", "steps"))
    frame["step_ms"] = runtime / steps * 1e3
    frame["variant_rank"] = [list(VARIANTS).index(v) if v in VARIANTS else len(VARIANTS) for v in frame["variant"]]
    frame["interval"] = [
        interval_text(*v) for v in zip(frame["speedup_low"], frame["speedup_high"], frame["significant"])
    ]
    measurement = frame["measurement"].to_dict()
    frame["baseline_measurement"] = [None if b is None else judged(measurement[b]) for b in base]
    frame["own_marked"] = [judged(m) not in (None, OK) for m in frame["measurement"]]
    frame["speedup_marked"] = [
        (speedup_unsure(m, b) or below_gate(t) or unproven(t)) and not math.isnan(as_float(s))
        for m, b, s, t in zip(frame["measurement"], frame["baseline_measurement"], frame["speedup"], frame["tokens"])
    ]
    unjudged = frame["measurement"].map(judged).isna()  # recorded before trials were judged: the old cv warning
    frame["noisy"] = unjudged & (pd.to_numeric(frame.get("runtime_cv"), errors="coerce") > NOISY_CV)
    frame["vs_generate"], peer_marked = vs_generate(frame)
    frame["vs_generate_marked"] = [
        (own or peer or unproven(t)) and not math.isnan(v)
        for own, peer, t, v in zip(frame["own_marked"], peer_marked, frame["tokens"], frame["vs_generate"])
    ]
    frame["price_per_hour"] = [price_of(prices or {}, g, d) for g, d in zip(frame["gpu_type"], frame["device"])]
    useful = pd.to_numeric(frame.get("useful_tokens_per_s"), errors="coerce")
    frame["cost_per_mtok"] = frame["price_per_hour"] / 3600 / useful * 1e6
    return frame, downloads


def row_knobs(frame: pd.DataFrame) -> list[dict]:
    """Each row's knobs (a store older than a knob has no column for it: its plain value)."""
    records = frame[[k for k in KNOBS if k in frame]].to_dict("records")  # dicts: not a Series per row
    return [{k: record.get(k) for k in KNOBS} for record in records]


def gated_rows(frame: pd.DataFrame) -> pd.Series:
    """The finished trials whose values are held to the fidelity gate instead of the baseline's checksum."""
    finished_ = frame["status"] == FINISHED
    return pd.Series([bool(f) and gated(k) for f, k in zip(finished_, row_knobs(frame))], index=frame.index, dtype=bool)


def fidelity_verdicts(rows: pd.DataFrame) -> list[str]:
    """Each gated trial's verdict, judged at the gate its sweep measured it with (tokengen.contract.fidelity); a
    speculative one's against its plain twin, from its record's proof."""
    gates = pd.to_numeric(rows["fidelity_gate"], errors="coerce").fillna(DEFAULT_GATE)
    column = {c: rows[c] if c in rows else [None] * len(rows) for c in PROOF}
    return [
        speculative_verdict(as_float(step), as_float(margin), dtype, not math.isnan(as_float(exact)))
        if (kind := fidelity_of(k)) == SPECULATIVE
        else verdict(kind, as_float(a), g, m, as_float(mg))
        for k, a, g, m, mg, step, margin, exact, dtype in zip(
            row_knobs(rows), rows["top1_agreement"], gates, rows["model"], *column.values(), rows["dtype"]
        )
    ]


PROOF = ("top1_margin_median", "first_divergence_step", "divergence_margin", "rows_exact")


def env_vs_baseline(frame: pd.DataFrame, base: pd.Series) -> list[str]:
    """What differs between where each trial and its baseline were measured (their fingerprints'
    facts, tokengen/contract/machine/fingerprint.py): '' where nothing does or the facts are unknown. A speedup
    over a baseline measured with other threads, versions, device or checkpoint is not a speedup of
    the variant alone, so the report names the difference beside it."""
    facts = frame["env_facts"] if "env_facts" in frame else pd.Series(None, index=frame.index, dtype=object)
    named = []
    for label, b in base.items():
        mine, theirs = from_text(facts.get(label)), from_text(facts.get(b)) if b is not None else {}
        named.append("; ".join(differences(mine, theirs)) if mine and theirs else "")
    return named


def speedup_unsure(measurement, baseline_measurement) -> bool:
    """A speedup to mark: its trial or its baseline was judged noisy or contended (not judged: not marked)."""
    return any(judged(m) not in (None, OK) for m in (measurement, baseline_measurement))


def price_of(prices: dict, gpu_type, device) -> float:
    """The sweep's price per device-hour for a trial (its GPU type, or `cpu`), NaN where none is set."""
    price = price_per_hour(prices, "cpu" if device == "cpu" else gpu_type)
    return math.nan if price is None else price


def interval_text(low: float, high: float, significant) -> str:
    """'1.81-2.23x', and ' ~' (pyperf's "not significant") when the interval holds 1.0."""
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return ""
    return f"{low:.2f}-{high:.2f}x" + (" ~" if significant is False else "")


def vs_generate(frame: pd.DataFrame) -> tuple[pd.Series, list[bool]]:
    """Each trial's runtime over the fastest transformers generate() peer's at the same point (same
    workload and GPU type): below 1.0, ours is faster than the library people would use instead; and
    whether that peer's own measurement was not ok (the ratio then carries the mark)."""
    engine = frame["engine"] if "engine" in frame else pd.Series(plain("engine").name, index=frame.index)
    done = frame["status"] == FINISHED
    peers = frame[done & engine.astype(str).isin(in_family("engine", PEER))]
    peers = peers.assign(
        _key=match_keys(peers, REPORT_MATCH), _runtime=pd.to_numeric(peers["runtime_mean_s"], errors="coerce")
    )
    fastest = peers.sort_values("_runtime", kind="stable").drop_duplicates("_key").set_index("_key")
    best, unsure = fastest["_runtime"].to_dict(), fastest["own_marked"].astype(bool).to_dict()
    keys = match_keys(frame, REPORT_MATCH)
    runtime = pd.to_numeric(frame["runtime_mean_s"], errors="coerce")
    ratios = [r / best[k] if ok and k in best else math.nan for k, r, ok in zip(keys, runtime, done)]
    return pd.Series(ratios, index=frame.index, dtype=float), [bool(ok and unsure.get(k)) for k, ok in zip(keys, done)]


def lacks_baselines(trials: pd.DataFrame) -> bool:
    """Whether some finished trial has no matching baseline among the sweep's own trials."""
    trials = trials.assign(**{c: None for c in REQUIRED if c not in trials})
    done = (trials["status"] == FINISHED) & (trials["variant"] != "baseline")
    return bool(baseline_of(trials, match=REPORT_MATCH)[done].isna().any())


def varying(frame: pd.DataFrame, columns: list[str] = CONTEXT) -> list[str]:
    return [c for c in columns if c in frame and distinct_keys(frame[c].tolist()) > 1]


def finished(frame: pd.DataFrame) -> pd.DataFrame:
    rows = frame[(frame["status"] == FINISHED) & frame["in_sweep"].astype(bool)]
    return rows.sort_values(varying(frame) + POINT + ["variant_rank", "variant"], kind="stable")


def pick(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    for column in columns:
        if column not in frame:
            frame = frame.assign(**{column: float("nan")})
    return frame[columns].reset_index(drop=True)


def measurement_text(measurement, baseline_measurement) -> str:
    """The trial's verdict, and its baseline's where only the baseline's spoils the speedup."""
    own, base = judged(measurement), judged(baseline_measurement)
    text = own or "not judged"
    return f"{text} (baseline {base})" if own in (None, OK) and base not in (None, OK) else text
