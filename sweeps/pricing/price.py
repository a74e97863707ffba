"""A sweep's price before it runs: every planned trial's estimated seconds on a worker, the device-hours
and cost per accelerator type, the wall on the workers, the budget guard and the order of submission.

    priced = price_sweep(config)            # plans as a real run, reads the store read-only, fits once
    priced.refusal()                        # one line when the estimate passes sweep.max_* (else None)
    priced.submission_order(trials)         # longest first

A trial's estimate is sweeps.pricing.price.estimate's (warmup, timed runs, the instrumented run, the compile, the
profiled run, the model's build, the harness around the trial process) plus, where the configuration
has `sweep.remeasure`, its remeasure rounds (each the whole trial again, at the share of the history's
first attempts that were not ok), plus on the first trial each worker runs the worker's start-up
(`start_s`: once per worker, not per key). Nothing here starts Ray or writes to the store.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from sweeps.planning.config import SweepConfig, SweepSettings
from sweeps.planning.grid import GridPlan, PlannedTrial, plan_sweep
from sweeps.planning.settings import SHARED, inductor_mode
from sweeps.pricing.estimate import Estimate, estimate, fit
from sweeps.pricing.estimate.hardware import DEFAULT_GPU
from sweeps.pricing.estimate.history import device_kind
from sweeps.pricing.estimate.trials import INSTRUMENTED_RUNS, compiles, number, profile_runs
from sweeps.pricing.memory import memory_columns
from sweeps.pricing.priced import PLAN_COLUMNS, REUSED, RUN, Priced, _ordered, resume_runs
from sweeps.pricing.workers import CPU, find_workers, pool_of
from tokengen.contract.graphs import GRAPH_FIELDS, graph_key
from tokengen.contract.names import FINISHED
from tracking.measurement import OK, attempt_of
from tracking.store.history import History, StoreReadError, load_history

LIMITS = ("max_device_hours", "max_cost")
REMEASURE_PRIOR = {
    "cpu": (0.25, "a shared CPU machine's share, assumed"),
    "gpu": (
        3 / 12,
        "3 of the 12 trials of the H200 article table (docs/results.md, On a GPU) were "
        "judged noisy; its one contended verdict was the table's own launcher",
    ),
}
"""The share of first attempts sent back to measure, where the history has no verdict on that kind of device."""
TRUSTED = OK


def trial_fields(trial: PlannedTrial, key: str | None = None) -> dict:
    return {**trial.spec.to_dict(), "key": key or trial.key, "accelerator_type": trial.accelerator_type}


def remeasure_rounds(sweep: SweepSettings) -> int:
    """Rounds `sweep.remeasure` allows a trial (0: none)."""
    return max(0, int(sweep.remeasure or 0))


def remeasured_share(history: History, kind: str = "cpu") -> tuple[float, str]:
    """The share of the history's first attempts on this kind of device (`cpu`, a GPU type, `cuda`) that a verdict
    other than ok sent back to measure (a later attempt is itself a remeasure, mostly ok, and would dilute the
    rate); where the history has no verdict on it, REMEASURE_PRIOR's for a CPU or a GPU node."""
    frame = history.frame
    prior, source = REMEASURE_PRIOR["cpu" if kind == "cpu" else "gpu"]
    if not frame.empty and "measurement" in frame:
        frame = frame[[device_kind(row) == kind for row in frame.to_dict("records")]]
        first = frame["attempt"].map(attempt_of) == 1 if "attempt" in frame else pd.Series(True, index=frame.index)
        verdicts = frame.loc[first, "measurement"].dropna().astype(str).str.lower()
        if len(verdicts):
            share = float((verdicts != TRUSTED).mean())
            return share, f"{kind}: {share:.0%} of the store's {len(verdicts)} first attempt(s) there were not ok"
    return prior, f"{kind}: {prior:.0%} ({source}; the store has no verdict there)"


def device_type(fields: dict, model, cluster_types: list[str]) -> tuple[str, bool]:
    """What a trial's hours are priced as, and whether that is assumed: cpu, its pinned accelerator type,
    or for an unpinned CUDA trial the GPU the history ran it on, the cluster's only type, else DEFAULT_GPU."""
    if fields.get("device") != "cuda":
        return CPU, False
    if fields.get("accelerator_type"):
        return str(fields["accelerator_type"]), False
    kind = model.device_kind(fields)
    if kind not in ("cpu", "cuda"):
        return kind, False
    if len(cluster_types) == 1:
        return cluster_types[0], False
    return DEFAULT_GPU, True


def _median(rows: pd.DataFrame, column: str) -> float | None:
    values = rows[column].dropna() if len(rows) and column in rows else []
    return float(np.median(values)) if len(values) else None


def breakdown(fields: dict, model, found: Estimate) -> dict:
    """The estimate's parts: each kind of run (a run's seconds x how many), the compile (the first run's
    extra), the model's build and the harness around the trial process. A trial measured before as it
    is (basis history, one measured total) is split by its own runs' derived columns."""
    counts = {
        "warmup_s": float(number(fields, "warmup")),
        "timed_s": model.timed_runs(fields).mid,
        "instrumented_s": float(INSTRUMENTED_RUNS),
        "profiled_s": profile_runs(fields) if str(fields.get("profile", "off")) != "off" else 0.0,
    }
    if "runs" in found.parts:
        run = found.parts["run"]
        fixed = {
            "compile_s": found.parts["compile"],
            "build_s": found.parts["build"],
            "harness_s": found.parts["harness"],
        }
    else:
        _, exact = model.identical(fields)
        compile_, build = _median(exact, "compile_s") or 0.0, _median(exact, "build_s") or 0.0
        inside = _median(exact, "trial_wall_s")
        inside = found.seconds if inside is None else inside
        run = max(inside - compile_ - build, 0.0) / max(sum(counts.values()), 1.0)
        fixed = {"compile_s": compile_, "build_s": build, "harness_s": found.seconds - inside}
    return {**{part: run * count for part, count in counts.items()}, **fixed, "run_s": run}


COMPILED_GRAPH = GRAPH_FIELDS
"""The fields that decide which graphs a compile makes (tokengen/contract/graphs.py): the shape, and the knobs
declared to change the graph (twins differing in their stop check share them)."""


def price_rows(
    trials: list[PlannedTrial],
    model,
    rounds: int,
    share,
    cluster_types: list[str],
    finished: set[str],
    resume: bool,
    shared_compiles: bool = False,
) -> tuple[pd.DataFrame, int]:
    """One row per planned trial; also how many device types were assumed. With `shared_compiles`
    (sweep.inductor_cache=shared) the first trial of each compiled graph pays its cold compile and its twins a
    warm one (the cost model's: the history's warm compiles, else the measured prior share), as does every
    remeasure round. `share(kind)`: the remeasured share on that kind of device."""
    rows, assumed, compiled = [], 0, set()
    for trial in trials:
        key = trial.key  # a hash of the spec: once per trial
        fields = trial_fields(trial, key)
        found = estimate(fields, model)
        parts = breakdown(fields, model, found)
        seconds, low, high = found.seconds, found.low, found.high
        runs = resume_runs(resume, key, finished)
        saved = 0.0  # what a warm compile saves against the cold one
        if shared_compiles and compiles(fields):
            saved = max(parts["compile_s"] - model.warm_compile(fields)[0].mid, 0.0)
            graph = graph_key(fields, trial.accelerator_type)
            if runs and graph in compiled:
                parts["compile_s"] -= saved
                scale = (seconds - saved) / seconds if seconds > 0 else 1.0
                seconds, low, high = seconds * scale, low * scale, high * scale
            compiled.add(graph)
        device, guessed = device_type(fields, model, cluster_types)
        extra = 0.0
        if rounds:  # a round runs the whole trial again, in a process of its own on a warm worker
            one_round = found.seconds - saved
            extra = rounds * share(model.device_kind(fields)) * one_round
            seconds, high = seconds + extra, high + rounds * one_round
        assumed += guessed
        rows.append(
            {
                **fields,
                "action": RUN if runs else REUSED,
                "device_type": device,
                "pool": pool_of(fields["device"], trial.accelerator_type),
                "estimated_s": seconds,
                "low_s": low,
                "high_s": high,
                "basis": found.basis,
                "in_trial_s": seconds - parts["harness_s"],
                **parts,
                "remeasure_s": extra,
                "start_s": 0.0,
                "order": None,
                **memory_columns(trial.spec),
            }
        )
    return pd.DataFrame(rows, columns=list(PLAN_COLUMNS)), assumed


def price_sweep(
    config: SweepConfig,
    plan: GridPlan | None = None,
    history: History | None = None,
    reader=None,
    waiting: list[dict] = (),
) -> Priced:
    """Plan the sweep as a real run would (grid, drops, resume against the store and the journal), read
    the store read-only, fit the cost model once and estimate every planned trial (`waiting`: the results
    an earlier driver journaled and did not record, sweeps.delivery.journal.journaled_results). SpecError for a bad
    grid, tracking.store.history.StoreReadError for a store that cannot be read."""
    started = time.perf_counter()
    sweep, tracking = config.sweep, config.tracking
    plan = plan or plan_sweep(config)
    history = history or load_history(tracking.uri, tracking.experiment)
    finished = history.finished_keys | {r["key"] for r in waiting if r.get("status") == FINISHED}
    pools = {pool_of(t.spec.device, t.accelerator_type) for t in plan.trials}
    workers = find_workers(config, pools, **({"reader": reader} if reader else {}))
    model = fit(history.trusted())
    rounds = remeasure_rounds(sweep)
    shares: dict[str, tuple[float, str]] = {}

    def share(kind: str) -> float:
        if kind not in shares:
            shares[kind] = remeasured_share(history, kind)
        return shares[kind][0]

    cluster_types = list(workers.types)
    table, assumed = price_rows(
        plan.trials,
        model,
        rounds,
        share,
        cluster_types,
        finished,
        bool(sweep.resume),
        shared_compiles=inductor_mode(sweep.inductor_cache) == SHARED,
    )
    share_note = "; ".join(note for _, note in shares.values())
    notes = []
    if assumed:
        notes.append(
            f"{assumed} unpinned CUDA trial(s) priced as {DEFAULT_GPU}: the store has not run them on a "
            "GPU and sweep.accelerator_types pins none"
        )
    if rounds:
        notes.append(
            f"sweep.remeasure: {rounds} round(s), each the whole trial again, priced at {share_note}; "
            "the high end counts every round for every trial"
        )
    if workers.assumed:
        notes.append(f"workers: {workers.source}")
    limits = {name: getattr(sweep, name) for name in LIMITS}
    starts = {}  # a pool's workers are alike: its first trial prices their start-up
    for trial in plan.trials:
        pool = pool_of(trial.spec.device, trial.accelerator_type)
        if pool not in starts:
            starts[pool] = model.cold_start({**trial.spec.to_dict(), "accelerator_type": trial.accelerator_type})
    priced = Priced(
        plan,
        table,
        workers,
        history,
        dict(sweep.prices or {}),
        bool(sweep.resume),
        limits,
        notes,
        journaled=len(waiting),
        starts=starts,
    )
    priced = _ordered(priced)
    priced.seconds = time.perf_counter() - started
    return priced


class Refused(RuntimeError):
    """The sweep's estimate is over a limit: one line, before anything starts."""


def price_for_run(config: SweepConfig, say, waiting: list[dict] = ()) -> Priced | None:
    """price_sweep for a real run. Bad input (SpecError, StoreReadError) and an estimate over a limit
    (Refused) raise; a failure of the cost model itself is said in one line and the sweep goes on in
    the grid's order (None), unless a limit is set, which cannot then be checked (Refused)."""
    from tokengen.contract.record import first_line
    from tokengen.contract.spec import SpecError

    try:
        priced = price_sweep(config, waiting=waiting)
    except (SpecError, StoreReadError):
        raise
    except Exception as exc:  # noqa: BLE001 - the estimate is an aid: a sweep without one still runs
        limits = [f"sweep.{n}" for n in LIMITS if getattr(config.sweep, n) is not None]
        if limits:
            raise Refused(
                f"the sweep cannot be priced ({first_line(exc)}), so {' and '.join(limits)} cannot be "
                "checked: drop the limit, or report the error"
            ) from None
        say(f"estimate: none ({type(exc).__name__}: {first_line(exc)}): trials go in the grid's order")
        return None
    refusal = priced.refusal()
    if refusal:
        raise Refused(refusal)
    return priced
