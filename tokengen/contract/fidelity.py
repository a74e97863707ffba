"""Exact, or gated, and said which: the verdict on a trial whose values change the numbers.

An exact trial is proven by its tokens' checksum against the baseline's. A trial with an `equivalent`
value (the same math, other kernels) or a `lossy` one (quantized weights) is measured against the
reference model at the same point and weights instead (tokengen/measure/fidelity.py): the share of
steps whose top-1 token agrees when both are fed the reference's tokens. It passes at `gate` or above
(the sweep's `sweep.fidelity_gate`, default 99%: MLPerf accepts an optimized run at 99% of the
reference's accuracy). On random weights the logits' margins are tiny, so agreement there does not
predict a trained model's: such a verdict says `fidelity only (random weights)` and judges nothing.
Torch-free: the report and the terminal table read it.
"""

from __future__ import annotations

import math

from tokengen.contract.declarations import EXACT, fidelity_of
from tokengen.contract.models import is_local_path

DEFAULT_GATE = 0.99
GATE_ENV = "TOKENGEN_FIDELITY_GATE"
"""A trial process's environment: the sweep's gate, for the verdict the trial's own record carries."""
BELOW_GATE = "below gate"
RANDOM_WEIGHTS = "fidelity only (random weights)"


def gated(knobs: dict) -> bool:
    """Whether a trial's tokens are held to the gate rather than to the baseline's checksum."""
    return fidelity_of(knobs) != EXACT


def random_weights(model) -> bool:
    """A preset is built from seeded random weights; a local checkpoint carries trained ones."""
    return not (isinstance(model, str) and is_local_path(model))


def verdict(kind: str, agreement, gate: float, model) -> str:
    """`lossy 99.6%` (at or above the gate), `below gate 93.1%`, or on random weights
    `lossy 96.9%, fidelity only (random weights)`; `lossy (not measured)` without a figure."""
    if agreement is None or isinstance(agreement, float) and math.isnan(agreement):
        return f"{kind} (not measured)"
    share = f"{100 * float(agreement):.1f}%"
    if random_weights(model):
        return f"{kind} {share}, {RANDOM_WEIGHTS}"
    return f"{kind} {share}" if float(agreement) >= gate else f"{BELOW_GATE} {share}"


def below_gate(text) -> bool:
    """Whether a verdict says the trial failed its gate (its speedup is shown, flagged)."""
    return isinstance(text, str) and text.startswith(BELOW_GATE)
