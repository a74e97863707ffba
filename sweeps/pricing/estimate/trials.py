"""A trial's fields as the cost model reads them: defaults, counts of runs and steps, its family."""

from __future__ import annotations

import math
from typing import Mapping

from tokengen.contract.declarations import EAGER, RECOMPUTE, declared, in_family
from tokengen.contract.spec import KNOBS, TrialSpec

FIELDS_READ = (
    *"model dtype device batch_size max_seqlen prompt_len".split(),
    *KNOBS,
    *"requests warmup runs profile variant accelerator_type matmul_precision stop min_runs max_runs".split(),
)
DEFAULTS: dict = {**{name: getattr(TrialSpec(), name, None) for name in FIELDS_READ}, "variant": None}
"""TrialSpec's default of each field read (torch-free): a history row lacking another field is not taken for a
default. An unnamed variant is named by its knobs (family), not as the spec's baseline."""
INSTRUMENTED_RUNS = 1  # benchmark.run_trial runs the generator once more with a per-step timer
PROFILE_SLOWDOWN = {"off": 0.0, "torch": 2.0, "nsys": 1.3, "auto": 2.0}  # a profiled run in timed runs (a guess)
AUTO = "auto"


def get(trial: Mapping, name: str):
    """The trial's value, or the default when absent or null (MLflow, pandas)."""
    value = trial.get(name)
    return DEFAULTS.get(name) if value is None or (isinstance(value, float) and math.isnan(value)) else value


def number(trial: Mapping, name: str) -> int:
    return int(float(get(trial, name)))  # text too: a CLI flag, an MLflow param


def text(trial: Mapping, name: str) -> str:
    return str(get(trial, name))


def is_auto(runs) -> bool:
    return str(runs).strip().lower() in (AUTO, "0", "0.0")  # as the spec stores it: tokengen.contract.spec.AUTO_RUNS


def batches(trial: Mapping) -> int:
    """Batches a run goes through: 1, or for N requests about ceil(N / slots)."""
    requests, slots = number(trial, "requests"), max(number(trial, "batch_size"), 1)
    return 1 if requests <= 0 else -(-requests // slots)


def arrival_span_s(trial: Mapping) -> float:
    """The seconds a run's arrivals take at the trial's request_rate ((N - 1) / rate; 0 offline or under a trace,
    whose times the planner does not read): a run lasts at least that long, however fast its steps."""
    rate = float(trial.get("request_rate") or 0.0)
    return (number(trial, "requests") - 1) / rate if rate > 0 and number(trial, "requests") > 1 else 0.0


def expected_steps(trial: Mapping) -> int:
    return batches(trial) * max(number(trial, "max_seqlen"), 1)  # if no row stops early


def profile_runs(trial: Mapping) -> float:
    return PROFILE_SLOWDOWN.get(text(trial, "profile"), 2.0)  # in steady runs


def law(trial: Mapping) -> str:
    """cache=none recomputes the prefix every step (per-step cost grows with position); caches do not."""
    return "recompute" if text(trial, "cache") in in_family("cache", RECOMPUTE) else "cached"


def compiles(trial: Mapping) -> bool:
    """Whether the compile mode compiles (an unknown mode, from an older store, counts as compiled)."""
    return text(trial, "compile") not in in_family("compile", EAGER)


def compile_mode(trial: Mapping):
    try:  # None for a mode no longer declared
        return declared("compile", text(trial, "compile"))
    except KeyError:
        return None


def family(trial: Mapping, device_kind: str) -> str:
    """Trials one per-step law covers, as one string: model, device kind, dtype, the variant (or, unnamed, the
    knobs that shape a step's cost), batch or requests."""
    variant = trial.get("variant")
    if not (isinstance(variant, str) and variant and variant != "custom"):
        variant = "/".join(text(trial, k) for k in KNOBS)
    serving = "requests" if number(trial, "requests") > 0 else "batch"
    return " | ".join((text(trial, "model"), device_kind, text(trial, "dtype"), variant, serving))
