"""PyTorch-native autoregressive decoding, one optimization at a time, verified and measured.

Depends on torch and transformers only. `run_trial(spec)` is the whole public surface a sweep needs.
"""

from tokengen.spec import SpecError, TrialSpec

__all__ = ["SpecError", "TrialSpec", "run_trial", "resolve"]


def run_trial(spec: TrialSpec) -> dict:
    from tokengen.benchmark import run_trial as _run

    return _run(spec)


def resolve(variant: str | None = None, **fields) -> TrialSpec:
    from tokengen.validate import resolve as _resolve

    return _resolve(variant, **fields)
