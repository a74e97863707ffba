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

A `speculative` value (speculative decoding) returns greedy decoding's tokens in exact arithmetic, but its verify
forward over k + 1 positions may round otherwise than a one-token step, so a near-tie can flip. Its tokens are
compared with its plain twin's (the same trial with the value at its plain setting, run in the same process) bit for
bit: equal is `ok`; where a row differs the verdict names the first step where one does and the twin's top-1/top-2
logit margin there, `near-tie` where it is under NEAR_TIE for the dtype (`speculative_verdict`), and is never `ok`.
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
DIVERGED = "diverged"
NEAR_TIE = {"float32": 1e-3, "float16": 0.05, "bfloat16": 0.25}
"""The twin's top-1/top-2 logit margin under which a flipped token is a near-tie: the size of the rounding that
another kernel's order of sums makes in the dtype (float32: about 1e-5 of logits near 10; half precisions more)."""
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


def speculative_verdict(first_step, margin, dtype: str, measured: bool = True) -> str:
    """`ok` where every row's tokens are the twin's; else `diverged at step 12 (reference margin 0.0004: near-tie
    < 0.001)` or `diverged at step 12 (reference margin 2.31)`; `speculative (not measured)` without a proof."""
    if not measured:
        return "speculative (not measured)"
    if not _number(first_step):
        return "ok"
    text = f"{DIVERGED} at step {int(first_step)}"
    if not _number(margin):
        return text
    threshold = NEAR_TIE.get(dtype, NEAR_TIE["float32"])
    tie = f": near-tie < {threshold:g}" if float(margin) < threshold else ""
    return f"{text} (reference margin {float(margin):.3g}{tie})"


def below_gate(text) -> bool:
    """Whether a verdict says the trial failed its proof: below its gate, or diverged from its twin (its speedup is
    shown, flagged)."""
    return isinstance(text, str) and text.startswith((BELOW_GATE, DIVERGED))
