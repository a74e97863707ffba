"""`python -m sweeps.run +grid=NAME sweep.dry_run=true`: what the sweep would run and what it would cost.

Plans exactly as a real run (the grid, its drops with their reasons, resume against the store and the
driver's journal), runs no trial, starts no Ray, writes nothing to the store (tracking/store/history.py
reads it read-only; a missing SQLite file stays missing). Prints, per variant and in total, the trials
to run and those reused, the estimated device-seconds, the device-hours and cost per accelerator type
and the wall on the workers; writes reports/<sweep>/plan.csv (one row per planned trial, in submission
order) and plan.md (what it printed). Reuse is by key only: "reused (unverified)".
"""

from __future__ import annotations

import sys
import time

from sweeps.delivery.journal import journaled_results
from sweeps.pricing.memory import free_memory, memory_refusal
from sweeps.pricing.price import price_sweep
from sweeps.pricing.tables import write_plan
from tokengen.contract.spec import SpecError
from tracking.store.connect import redacted
from tracking.store.history import StoreReadError


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def dry_run(config: dict) -> int:
    """The dry run's command: 0 with the plan printed and written, 2 for bad input (one line)."""
    started = time.perf_counter()
    try:
        priced = price_sweep(config, waiting=journaled_results(config["tracking"]["experiment"], config["sweep"]["name"]))
    except (SpecError, StoreReadError) as exc:
        _say(f"error: {exc}")
        return 2
    for line in priced.plan.describe():
        _say(line)
    csv, md, text = write_plan(priced, config)
    print(text, end="")
    if not config["ray"]["address"]:
        refusal = memory_refusal(priced.plan.trials, free_memory(), config["sweep"].get("memory_guard"))
        if refusal:
            _say(f"memory: a real run would be refused: {refusal}")
    _say(f"dry run: plan in {md} and {csv} ({len(priced.table)} trial(s), planned in {priced.seconds:.2f} s, "
         f"{time.perf_counter() - started:.2f} s with the files); nothing ran, nothing was written to "
         f"{redacted(config['tracking']['uri'])}")
    return 0
