"""`python -m sweeps.run +grid=NAME sweep.dry_run=true`: what the sweep would run and what it would cost.

Plans exactly as a real run (the grid, its drops with their reasons, resume against the store and the
driver's journal), runs no trial, starts no Ray, writes nothing to the store (tracking/store/history.py
reads it read-only; a missing SQLite file stays missing). Prints, per variant and in total, the trials
to run and those reused, the estimated device-seconds, the device-hours and cost per accelerator type
and the wall on the workers; writes reports/<sweep>/plan.csv (one row per planned trial, in submission
order) and plan.md (what it printed). Reuse is by key only: "reused (unverified)". A trial the memory guard
would refuse on this machine's own devices is marked in plan.md, and an estimate over sweep.max_device_hours or
sweep.max_cost is said in plan.md and as the last line: either way the plan is still written and the dry run
exits 2, as the real run would refuse it (a script reading the status learns so).
"""

from __future__ import annotations

import time

from sweeps.delivery.journal import journaled_results
from sweeps.planning.config import SweepConfig
from sweeps.pricing.memory_guard import sweep_refusal
from sweeps.pricing.plan_tables import write_plan
from sweeps.pricing.price import price_sweep
from sweeps.say import say
from tokengen.contract.memory_estimate import free_memory
from tokengen.contract.spec import SpecError
from tracking.store.connect import redacted
from tracking.store.history import StoreReadError


def dry_run(config: SweepConfig) -> int:
    """The dry run's command: 0 with the plan printed and written, 2 for bad input (one line) or for a plan a real
    run would refuse (written, its refusal the last line)."""
    started = time.perf_counter()
    try:
        priced = price_sweep(config, waiting=journaled_results(config.tracking.experiment, config.sweep.name))
    except (SpecError, StoreReadError) as exc:
        say(f"error: {exc}")
        return 2
    for line in priced.plan.describe():
        say(line)
    csv, md, text = write_plan(priced, config)
    print(text, end="")
    refused = [] if config.ray.address else refused_here(priced.plan.trials, config.sweep.memory_guard)
    if refused:
        mark = (
            f"memory: a real run would refuse {len(refused)} trial(s) on this machine: "
            + ", ".join(t.key for t in refused[:8])
            + (" ..." if len(refused) > 8 else "")
        )
        with open(md, "a") as plan:
            plan.write(f"\n{mark}\n")
        say(mark)
    say(
        f"dry run: plan in {md} and {csv} ({len(priced.table)} trial(s), planned in {priced.seconds:.2f} s, "
        f"{time.perf_counter() - started:.2f} s with the files); nothing ran, nothing was written to "
        f"{redacted(config.tracking.uri)}"
    )
    if refused:
        say(f"error: {sweep_refusal(refused, free_memory(), config.sweep.memory_guard)}")
    over = priced.refusal(md)  # the budget guard a real run meets first: the plan is written, the refusal said last
    if over:
        say(f"error: {over}")
    return 2 if refused or over else 0


def refused_here(trials, guard: float | None) -> list:
    """The trials the memory guard would refuse on this machine's own devices (a local Ray's): a CUDA trial
    only where this machine has a GPU, so pricing a GPU grid on a laptop is still a plan, not an error."""
    free = free_memory()
    own = [t for t in trials if t.spec.device != "cuda" or free.gpus]
    return [t for t in own if sweep_refusal([t], free, guard)]
