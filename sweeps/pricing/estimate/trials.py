"""A trial's fields as the cost model reads them: defaults, counts of runs and steps, its family.

The defaults are tokengen.contract.spec.TrialSpec's (torch-free like the cost model), for the fields
the cost model reads; a trial dict that names every field (as a sweep's plan does) never reaches them.
"""

from __future__ import annotations

import math
from typing import Mapping

from tokengen.contract.declarations import EAGER, RECOMPUTE, declared, in_family
from tokengen.contract.spec import KNOBS, TrialSpec

FIELDS_READ = (
    "model",
    "dtype",
    "device",
    "batch_size",
    "max_seqlen",
    "prompt_len",
    *KNOBS,
    "requests",
    "warmup",
    "runs",
    "profile",
    "variant",
    "accelerator_type",
    "matmul_precision",
    "stop",
    "min_runs",
    "max_runs",
)
"""The fields the cost model reads of a trial; a history row lacking another is not taken for a default."""
_SPEC = TrialSpec()
DEFAULTS: dict = {
    **{name: getattr(_SPEC, name, None) for name in FIELDS_READ},
    "variant": None,  # unnamed: variant_family names the trial by its knobs, not as the spec's baseline
}
"""Each read field's default (accelerator_type, no spec field, has none); runs=auto (stored as 0,
tokengen/measure/run_count.py RunPolicy) times between min_runs and max_runs."""

INSTRUMENTED_RUNS = 1
"""benchmark.run_trial always runs the generator once more with a per-step timer (ttft_s, step latencies)."""

PROFILE_SLOWDOWN = {"off": 0.0, "torch": 2.0, "nsys": 1.3, "auto": 2.0}
"""A profiled run's cost in plain runs (guess: torch.profiler's tracing ~2x, nsys' ~1.3x)."""

AUTO = "auto"


def missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def get(trial: Mapping, name: str):
    """The trial's value, or the default when absent or null (MLflow, pandas)."""
    value = trial.get(name)
    return DEFAULTS.get(name) if missing(value) else value


def number(trial: Mapping, name: str) -> int:
    """An integer field; text (a CLI flag, an MLflow param) is parsed."""
    return int(float(get(trial, name)))


def text(trial: Mapping, name: str) -> str:
    return str(get(trial, name))


def is_auto(runs) -> bool:
    """runs=auto, as a word or as the spec stores it (0: tokengen.contract.spec.AUTO_RUNS)."""
    return str(runs).strip().lower() in (AUTO, "0", "0.0")


def fixed_runs(trial: Mapping) -> int | None:
    """The timed runs, or None when runs='auto' (a stopping rule decides)."""
    runs = get(trial, "runs")
    return None if is_auto(runs) else int(float(runs))


def batches(trial: Mapping) -> int:
    """Batches a run goes through: 1, or for N requests about ceil(N / slots)."""
    requests, slots = number(trial, "requests"), max(number(trial, "batch_size"), 1)
    return 1 if requests <= 0 else -(-requests // slots)


def expected_steps(trial: Mapping) -> int:
    """Decode steps (forwards) of one run if no row stops early: max_seqlen per batch."""
    return batches(trial) * max(number(trial, "max_seqlen"), 1)


def plain_runs(trial: Mapping, timed: float) -> float:
    """Runs that cost one steady run each, the first counted (its compile is added apart):
    warmup + timed + the instrumented run. With warmup=0 the first timed run is the first run."""
    return number(trial, "warmup") + timed + INSTRUMENTED_RUNS


def profile_runs(trial: Mapping) -> float:
    """The profiled run's cost, in steady runs."""
    return PROFILE_SLOWDOWN.get(text(trial, "profile"), 2.0)


def law(trial: Mapping) -> str:
    """cache=none recomputes the prefix every step (per-step cost grows with position); caches do not."""
    return "recompute" if text(trial, "cache") in in_family("cache", RECOMPUTE) else "cached"


def compiles(trial: Mapping) -> bool:
    """Whether the trial's compile mode compiles (an unknown mode, from an older store, counts as compiled)."""
    return text(trial, "compile") not in in_family("compile", EAGER)


def compile_mode(trial: Mapping):
    """The trial's compile mode's declaration, or None for a mode no longer declared."""
    try:
        return declared("compile", text(trial, "compile"))
    except KeyError:
        return None


def variant_family(trial: Mapping) -> str:
    """The variant label, or for an unnamed one the knobs that shape a step's cost."""
    variant = trial.get("variant")
    if isinstance(variant, str) and variant and variant != "custom":
        return variant
    return "/".join(text(trial, k) for k in KNOBS)


def family(trial: Mapping, device_kind: str) -> str:
    """Trials one per-step law covers: same model, device kind, dtype, variant, batch or requests
    (as one string: a plain column to group and compare on)."""
    serving = "requests" if number(trial, "requests") > 0 else "batch"
    return " | ".join((text(trial, "model"), device_kind, text(trial, "dtype"), variant_family(trial), serving))
