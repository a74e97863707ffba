"""The sweep's side of the memory guard: each planned trial's estimated peak in the plan, and a local Ray's trials
refused before it starts. The estimate and the guard are the contract's (tokengen/contract/memory_estimate.py), which
`python -m tokengen` asks too."""

from __future__ import annotations

import math

from sweeps.planning.config import SweepConfig
from tokengen.contract.memory_estimate import GB, estimate_memory, free_memory, memory_refusal
from tokengen.contract.spec import SpecError, TrialSpec

SETTING = "sweep.memory_guard="
SWEEP_FIX = "narrow the grid, or set sweep.memory_guard=null to run it anyway"


def memory_columns(spec: TrialSpec) -> dict:
    """The plan's columns (plan.csv): each trial's estimated peak, GB, per device."""
    found = estimate_memory(spec)
    rss, cuda = (math.nan, None) if found is None else (found.rss / GB, found.cuda)
    return {"memory_rss_gb": rss, "memory_cuda_gb": math.nan if cuda is None else cuda / GB}


def sweep_refusal(trials, free, guard: float | None) -> str | None:
    """The guard's line for a sweep's trials, naming the sweep's setting and its fix."""
    return memory_refusal(trials, free, guard, setting=SETTING, fix=SWEEP_FIX)


def check_local_memory(trials, config: SweepConfig) -> None:
    """A local Ray's trials share this machine's memory: one estimated past sweep.memory_guard of what is free is
    refused (SpecError), before Ray starts."""
    refusal = None if config.ray.address else sweep_refusal(trials, free_memory(), config.sweep.memory_guard)
    if refusal:
        raise SpecError(refusal)
