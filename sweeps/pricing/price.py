"""A sweep's price before it runs: each planned trial's seconds on a worker (sweeps.pricing.estimate's, plus its
`sweep.remeasure` rounds and, on the first trial each worker takes, the worker's start-up) and the budget guard.
Nothing here starts Ray or writes to the store."""

from __future__ import annotations

import time

import pandas as pd

from sweeps.planning.config import SweepConfig
from sweeps.planning.grid import GridPlan, PlannedTrial, plan_sweep
from sweeps.planning.settings import SHARED
from sweeps.pricing.estimate import estimate, fit
from sweeps.pricing.estimate.hardware import (
    DEFAULT_GPU,
    NOMINAL,
    CpuSpeed,
    forget_kept,
    kept_or_nominal,
    used_calibration,
)
from sweeps.pricing.estimate.model import CostModel
from sweeps.pricing.estimate.observed import device_kind
from sweeps.pricing.estimate.trials import INSTRUMENTED_RUNS, compiles, number, profile_runs
from sweeps.pricing.memory_guard import memory_columns
from sweeps.pricing.priced import PLAN_COLUMNS, REUSED, RUN, Limits, Priced
from sweeps.pricing.workers import CPU, find_workers, pool_of
from tokengen.contract.graphs import GRAPH_FIELDS, graph_key
from tokengen.contract.names import FINISHED
from tokengen.contract.record import first_line
from tokengen.contract.spec import SpecError
from tokengen.contract.trial_record import TrialRecord
from tracking.measurement import OK, attempt_of
from tracking.store.history import History, StoreReadError, load_history

H200_TABLE = (
    "4 of the 12 trials of the H200 article table (docs/results.md, On a GPU) would be sent back: 3 judged noisy, "
    "and the one judged contended by the table's own launcher, no longer counted, is above the noisy cv too"
)
REMEASURE_PRIOR = {"cpu": (0.25, "a shared CPU machine's share, assumed"), "gpu": (4 / 12, H200_TABLE)}
"""The share of first attempts sent back to measure, where the history has no verdict on that kind of device."""
NSYS_UNPRICED = (  # of the trials that will run
    "{} CUDA trial(s) under nsys priced without nsys's own cost: the trial run again in a process of its own, its "
    "stream written, converted and summarized (22 s more for a compiled CPU trial on a loaded 2-core machine)"
)
COMPILED_GRAPH = GRAPH_FIELDS  # what decides a compile's graphs (tokengen/contract/graphs.py): twins share them


def remeasured_share(history: History, kind: str = "cpu") -> tuple[float, str]:
    """The share of the history's first attempts on this kind of device (`cpu`, a GPU type, `cuda`) that a verdict
    other than ok sent back (later attempts, mostly ok, would dilute it), with a note; else REMEASURE_PRIOR's."""
    frame = history.frame
    if not frame.empty and "measurement" in frame:
        frame = frame[[device_kind(row) == kind for row in frame.to_dict("records")]]
        first = frame["attempt"].map(attempt_of) == 1 if "attempt" in frame else pd.Series(True, index=frame.index)
        verdicts = frame.loc[first, "measurement"].dropna().astype(str).str.lower()
        if len(verdicts):
            share = float((verdicts != OK).mean())
            return share, f"{kind}: {share:.0%} of the store's {len(verdicts)} first attempt(s) there were not ok"
    prior, source = REMEASURE_PRIOR["cpu" if kind == "cpu" else "gpu"]
    return prior, f"{kind}: {prior:.0%} ({source}; the store has no verdict there)"


def device_type(fields: dict, model: CostModel, cluster_types: list[str]) -> tuple[str, bool]:
    """What a trial's hours are priced as, and whether that is assumed: cpu, its pinned accelerator type, or for an
    unpinned CUDA trial the GPU the history ran it on, the cluster's only type, else DEFAULT_GPU."""
    if fields.get("device") != "cuda":
        return CPU, False
    kind = fields.get("accelerator_type") or model.device_kind(fields)
    if kind not in ("cpu", "cuda"):
        return str(kind), False
    return (cluster_types[0], False) if len(cluster_types) == 1 else (DEFAULT_GPU, True)


def trial_row(trial: PlannedTrial, model: CostModel, runs: bool, warm: bool, shared: bool, rounds: int, share) -> dict:
    """One planned trial's row of the plan, its seconds by part. Under a `shared` inductor cache a `warm` trial (a
    twin of a graph priced before) and every remeasure round pay the warm compile; `share(kind)`: the rounds' share."""
    fields = {**trial.spec.to_dict(), "key": trial.key, "accelerator_type": trial.accelerator_type}
    found = estimate(fields, model)
    counts = (number(fields, "warmup"), model.timed_runs(fields).mid, INSTRUMENTED_RUNS, profile_runs(fields))
    parts = {
        f"{kind}_s": found.parts["run"] * n for kind, n in zip(("warmup", "timed", "instrumented", "profiled"), counts)
    }
    parts.update({f"{part}_s": found.parts[part] for part in ("compile", "build", "harness")})
    saved = max(parts["compile_s"] - model.warm_compile(fields)[0].mid, 0.0) if shared and compiles(fields) else 0.0
    scale = (found.seconds - saved) / found.seconds if warm and found.seconds > 0 else 1.0
    parts["compile_s"] -= saved if warm else 0.0
    one_round = found.seconds - saved  # the whole trial again, on a warm worker
    extra = rounds * share(model.device_kind(fields)) * one_round if rounds else 0.0
    seconds = found.seconds * scale
    return {
        **fields,
        "action": RUN if runs else REUSED,
        "pool": pool_of(fields["device"], trial.accelerator_type),
        "estimated_s": seconds + extra,
        "low_s": found.low * scale,
        "high_s": found.high * scale + rounds * one_round,
        "basis": found.basis,
        "in_trial_s": seconds + extra - parts["harness_s"],
        **parts,
        "remeasure_s": extra,
        "start_s": 0.0,
        **memory_columns(trial.spec),
    }


def price_sweep(
    config: SweepConfig,
    plan: GridPlan | None = None,
    history: History | None = None,
    reader=None,
    waiting=(),
    cpu: CpuSpeed | None = None,
) -> Priced:
    """Plan the sweep as a real run would (grid, drops, resume against the store and the journal's `waiting`
    results), read the store read-only, fit the cost model once and price every planned trial. `cpu`: the CPU
    figures to price CPU trials from (None: this host's calibration, measured where none is kept). SpecError for
    a bad grid, StoreReadError for a store that cannot be read."""
    started, sweep = time.perf_counter(), config.sweep
    plan = plan or plan_sweep(config)
    history = history or load_history(config.tracking.uri, config.tracking.experiment)
    finished = history.finished_keys | {r.key for r in waiting if r.status == FINISHED}
    pools = {pool_of(t.spec.device, t.accelerator_type) for t in plan.trials}
    workers = find_workers(config, pools, **({"reader": reader} if reader else {}))
    model, rounds = fit(history.trusted(), cpu), max(0, int(sweep.remeasure or 0))
    shared = sweep.inductor_cache == SHARED  # the earlier words read as the current ones (SweepSettings)
    shares, compiled, rows, starts, assumed, traced = {}, set(), [], {}, 0, 0

    def share(kind: str) -> float:
        if kind not in shares:
            shares[kind] = remeasured_share(history, kind)
        return shares[kind][0]

    for trial in plan.trials + plan.later:  # a peak search's further probes at their most
        runs = not (sweep.resume and trial.key in finished)
        graph = graph_key(trial.spec.to_dict(), trial.accelerator_type) if shared else None
        row = trial_row(trial, model, runs, runs and graph in compiled, shared, rounds, share)
        row["device_type"], guessed = device_type(row, model, list(workers.types))
        if row["pool"] not in starts:  # a pool's workers are alike: its first trial prices their start-up
            starts[row["pool"]] = model.cold_start(row)
        rows.append(row)
        assumed += guessed
        traced += runs and trial.spec.device == "cuda" and trial.spec.profile == "nsys"
        compiled |= {graph} - {None}
    notes = []
    if assumed:
        notes.append(
            f"{assumed} unpinned CUDA trial(s) priced as {DEFAULT_GPU}: the store has not run them on a GPU and "
            "sweep.accelerator_types pins none"
        )
    if rounds:
        notes.append(
            f"sweep.remeasure: {rounds} round(s), each the whole trial again, priced at "
            f"{'; '.join(note for _, note in shares.values())}; the high end counts every round for every trial"
        )
    if plan.later:
        searches = len({t.search for t in plan.trials})
        notes.append(
            f"peak search: {searches} search(es), each priced at its most, {len(plan.trials + plan.later) // searches} "
            "probes: both ends and every middle on the slowest path (each middle failing, each lower than the last)"
        )
    if workers.assumed:
        notes.append(f"workers: {workers.source}")
    if traced:
        notes.append(NSYS_UNPRICED.format(traced))
    calibration = used_calibration()
    if any(t.spec.device != "cuda" for t in plan.trials):
        if cpu is NOMINAL:
            notes.append(NOMINAL_NOTE.format(NOMINAL.gflops, NOMINAL.gbs))
        elif calibration is not None:
            notes.append(calibration.describe())
    table = pd.DataFrame(rows, columns=list(PLAN_COLUMNS))
    limits = Limits.of(sweep)
    priced = Priced(plan, table, workers, history, dict(sweep.prices or {}), bool(sweep.resume), limits, notes, starts)
    priced.journaled, priced.seconds = len(waiting), time.perf_counter() - started
    priced.nominal_cpu = cpu is NOMINAL and any(t.spec.device != "cuda" for t in plan.trials)
    return priced


NOMINAL_NOTE = (
    "CPU trials priced at a nominal {:g} GFLOP/s and {:g} GB/s (a real run measures no host; no calibration is kept "
    "for this one): their order holds, their seconds are rough; sweep.dry_run=true measures this host"
)
PRIOR_PROMISE = 3.0  # a dry run without history is within a factor of 3 (benchmarks/dry_run_accuracy.py)


class Refused(RuntimeError):
    """The sweep's estimate is over a limit: one line, before anything starts."""


def price_for_run(config: SweepConfig, say, waiting: list[TrialRecord] = ()) -> Priced | None:
    """price_sweep for a real run, to order its trials (longest first) and record its plan: from the store's history,
    else first principles, CPU trials at the day's kept calibration or NOMINAL, never measuring the host; with a
    budget limit the full cost model, the host calibrated. Bad input (SpecError, StoreReadError) and an estimate
    over a limit (Refused) raise; a failure of the cost model itself is said in one line and the sweep goes on in
    the grid's order (None), unless a limit is set, which cannot then be checked (Refused)."""
    limits = Limits.of(config.sweep).set()
    budgeted = bool(limits)
    try:
        priced = price_sweep(config, waiting=waiting, cpu=None if budgeted else kept_or_nominal())
    except (SpecError, StoreReadError):
        raise
    except Exception as exc:  # noqa: BLE001 - the estimate is an aid: a sweep without one still runs
        if limits:
            raise Refused(
                f"the sweep cannot be priced ({first_line(exc)}), so {' and '.join(limits)} cannot be "
                "checked: drop the limit, or report the error"
            ) from None
        say(f"estimate: none ({type(exc).__name__}: {first_line(exc)}): trials go in the grid's order")
        return None
    if priced.refusal():
        raise Refused(priced.refusal())
    calibration = used_calibration()
    if budgeted and calibration is not None and not calibration.quiet:  # measured for this run's budget: say so
        say(calibration.describe())
    return priced


def calibration_contradicted(priced: Priced | None, records: list[TrialRecord]) -> str | None:
    """After a sweep: where its CPU trials priced from the prior alone (no history to rescale it: the calibration's
    own figure) held their workers further from that price than a dry run without history promises (PRIOR_PROMISE),
    the kept calibration is dropped, so the next dry run or sweep measures the host again; the line says so."""
    calibration = used_calibration()
    if priced is None or calibration is None or not calibration.kept_in:
        return None
    table = priced.table
    prior = table[(table["pool"] == CPU) & (table["basis"] == "prior")].set_index("key")["estimated_s"]
    held = {
        r.key: r.result.node_finished_at - r.result.node_started_at
        for r in records
        if r.status == FINISHED and r.key in prior.index and r.result.node_started_at is not None
    }
    if not held:
        return None
    priced_s, held_s = float(prior[list(held)].sum()), float(sum(held.values()))
    if priced_s <= 0 or 1 / PRIOR_PROMISE <= held_s / priced_s <= PRIOR_PROMISE:
        return None
    forget_kept()
    return (
        f"cpu calibration: this sweep's {len(held)} CPU trial(s) priced from it held their workers {held_s:.1f} s "
        f"against {priced_s:.1f} s priced ({held_s / priced_s:.2f}x, beyond {PRIOR_PROMISE:g}x): it is no longer "
        "kept, and the next dry run or sweep measures this host again"
    )
