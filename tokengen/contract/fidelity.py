"""Exact, or gated, and said which: the verdict on a trial whose values change the numbers.

An exact trial is proven by its tokens' checksum against the baseline's. A trial with an `equivalent`
value (the same math, other kernels) or a `lossy` one (quantized weights) is measured against the
reference model at the same point and weights instead (tokengen/measure/agreement.py): the share of
steps whose top-1 token agrees when both are fed the reference's tokens. It passes at `gate` or above
(the sweep's `sweep.fidelity_gate`, default 99%: MLPerf accepts an optimized run at 99% of the
reference's accuracy). On random weights the logits' margins are tiny, so agreement there does not
predict a trained model's: such a verdict says `fidelity only (random weights)` and judges nothing. Trained
weights (a local checkpoint, a trained preset: tokengen/contract/trained.py) are judged where the reference's
median top-1/top-2 margin on the trial's rows is at least MARGIN_FLOOR logits; below it the verdict says so and
judges nothing either (a measured margin is in every gated record: `top1_margin_median`).
Torch-free: the report and the terminal table read it.
"""

from __future__ import annotations

import math

from tokengen.contract.declarations import EXACT, fidelity_of
from tokengen.contract.model_facts import is_local_path
from tokengen.contract.trained import trained

DEFAULT_GATE = 0.99
GATE_ENV = "TOKENGEN_FIDELITY_GATE"
"""A trial process's environment: the sweep's gate, for the verdict the trial's own record carries."""
BELOW_GATE = "below gate"
RANDOM_WEIGHTS = "fidelity only (random weights)"
MARGIN_FLOOR = 1.0
"""The reference's median top-1/top-2 logit margin a judged verdict needs: random GPT-2 weights give 0.47-0.65, the
trained preset well above (docs/results.md), so agreement on logits this close would not predict a real model's."""


def gated(knobs: dict) -> bool:
    """Whether a trial's tokens are held to the gate rather than to the baseline's checksum."""
    return fidelity_of(knobs) != EXACT


def random_weights(model) -> bool:
    """A preset is built from seeded random weights; a trained preset and a local checkpoint carry trained ones."""
    return not (isinstance(model, str) and (is_local_path(model) or trained(model)))


def verdict(kind: str, agreement, gate: float, model, margin=None) -> str:
    """`lossy 99.6%` (at or above the gate), `below gate 93.1%`, or on random weights
    `lossy 96.9%, fidelity only (random weights)`, or on a reference whose median margin `margin` is under
    MARGIN_FLOOR `lossy 99.2%, fidelity only (reference margin 0.62 < 1.0)`; `lossy (not measured)` without a
    figure. A margin not given (a record from before margins) judges trained weights as before."""
    if not _number(agreement):
        return f"{kind} (not measured)"
    share = f"{100 * float(agreement):.1f}%"
    if random_weights(model):
        return f"{kind} {share}, {RANDOM_WEIGHTS}"
    if _number(margin) and float(margin) < MARGIN_FLOOR:
        return f"{kind} {share}, fidelity only (reference margin {float(margin):.2f} < {MARGIN_FLOOR})"
    return f"{kind} {share}" if float(agreement) >= gate else f"{BELOW_GATE} {share}"


def _number(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def below_gate(text) -> bool:
    """Whether a verdict says the trial failed its gate (its speedup is shown, flagged)."""
    return isinstance(text, str) and text.startswith(BELOW_GATE)
