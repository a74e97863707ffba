"""The text forms of the spec's structured fields (stop, sampling, profile window), parsed in one place.

Torch-free, so the planner checks a grid's values without building anything; the decode loop
(tokengen.decode.stopping, tokengen.decode.sampling) and the profiler read the same parse.
"""

from __future__ import annotations

import re

from tokengen.contract.spec import SpecError

STOP_FORMS = "model | never | fixed:N | uniform:LO-HI | lognormal:MEDIAN,SIGMA"
SAMPLING_FORMS = "greedy | topk:K[,TEMPERATURE]"

_NUM = r"(\d+(?:\.\d+)?)"
_STOP_PATTERNS = {
    "fixed": re.compile(r"fixed:(\d+)"),
    "uniform": re.compile(r"uniform:(\d+)-(\d+)"),
    "lognormal": re.compile(rf"lognormal:{_NUM},{_NUM}"),
}


def parse_stop(stop: str) -> tuple[str, tuple]:
    """('model'|'never'|'fixed'|'uniform'|'lognormal', parameters); SpecError on anything else."""
    if stop in ("model", "never"):
        return stop, ()
    kind = stop.split(":", 1)[0]
    pattern = _STOP_PATTERNS.get(kind)
    match = pattern.fullmatch(stop) if pattern else None
    if not match:
        raise SpecError(f"stop={stop!r} is not understood: use {STOP_FORMS}")
    if kind == "fixed":
        n = int(match[1])
        if n < 1:
            raise SpecError(f"stop={stop!r}: N must be at least 1")
        return kind, (n,)
    if kind == "uniform":
        lo, hi = int(match[1]), int(match[2])
        if not 1 <= lo <= hi:
            raise SpecError(f"stop={stop!r}: need 1 <= LO <= HI")
        return kind, (lo, hi)
    median, sigma = float(match[1]), float(match[2])
    if median <= 0 or sigma <= 0:
        raise SpecError(f"stop={stop!r}: MEDIAN and SIGMA must be positive")
    return kind, (median, sigma)


def parse_sampling(sampling: str) -> tuple[int, float] | None:
    """None for greedy, else (k, temperature)."""
    if sampling == "greedy":
        return None
    match = re.fullmatch(r"topk:(\d+)(?:,(\d+(?:\.\d+)?))?", sampling)
    if not match or int(match[1]) < 1 or (match[2] is not None and float(match[2]) <= 0):
        raise SpecError(f"sampling={sampling!r} is not understood: use {SAMPLING_FORMS} (K >= 1, TEMPERATURE > 0)")
    return int(match[1]), float(match[2] or 1.0)


def parse_window(window: str) -> tuple[int, int]:
    """The profiled steps START-STOP (0-based, STOP excluded)."""
    match = re.fullmatch(r"(\d+)-(\d+)", window)
    if not match or int(match[1]) >= int(match[2]):
        raise SpecError(
            f"profile_steps={window!r} is not understood: use START-STOP with START < STOP (steps, 0-based)"
        )
    return int(match[1]), int(match[2])
