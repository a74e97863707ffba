"""A speculative trial's tokens against its plain twin's, bit for bit (tokengen/contract/fidelity.py:
`speculative_verdict`).

The twin is the same trial with every speculative value at its plain setting (same model, cache, compile, engine,
prompts and stop rule), generated once in the trial's process after its timed runs. Rows whose tokens equal the
twin's (over the shorter of the two: a row that ends earlier differs at its EOS), the first decode step where some
row differs and, there, the twin's top-1/top-2 logit margin on the first row that differs: the twin's model reads
the twin's tokens up to that step in one eager forward, so a flip on a near-tie (the verify's k + 1 positions summed
in another order than a one-token step's) is told apart from a wrong token.
"""

from __future__ import annotations

import dataclasses

import torch

from tokengen.contract import fidelity
from tokengen.contract.declarations import SPECULATIVE, plain, trial_values
from tokengen.contract.spec import TrialSpec


def twin_spec(spec: TrialSpec) -> TrialSpec:
    """The trial with each speculative value at its knob's plain setting, everything else kept."""
    plain_values = {d.knob: plain(d.knob).name for d in trial_values(spec.knobs) if d.fidelity == SPECULATIVE}
    return dataclasses.replace(spec, **plain_values)


def first_difference(tokens: torch.Tensor, expected: torch.Tensor, prompt_len: int) -> tuple[int, int | None, int]:
    """(rows whose generated tokens equal the twin's over the shorter of the two, the first decode step where some
    row differs or None, the first row that differs there)."""
    length = min(tokens.shape[1], expected.shape[1])
    differs = tokens[:, prompt_len:length].cpu() != expected[:, prompt_len:length].cpu()  # (B, steps)
    exact = int((~differs.any(dim=1)).sum())
    if exact == tokens.shape[0]:
        return exact, None, 0
    step = int(differs.any(dim=0).nonzero()[0])
    return exact, step, int(differs[:, step].nonzero()[0])


@torch.inference_mode()
def margin_at(model: torch.nn.Module, tokens: torch.Tensor, prompt_len: int, row: int, step: int) -> float:
    """The top-1 minus top-2 logit of `model` predicting decode step `step` of row `row` from `tokens` (B, T)."""
    logits = model(tokens[row : row + 1, : prompt_len + step]).logits[0, -1].float()  # (V,)
    top2 = logits.topk(2).values
    return float(top2[0] - top2[1])


def measure(spec: TrialSpec, model: torch.nn.Module, tokens: torch.Tensor | None) -> dict:
    """The record's fidelity fields for a speculative trial whose last run returned `tokens` (B, P + steps)."""
    from tokengen.engines import make_generator

    if tokens is None:
        return {"fidelity": SPECULATIVE, "fidelity_verdict": fidelity.speculative_verdict(None, None, "", False)}
    expected = make_generator(model, twin_spec(spec))().tokens  # (B, P + steps)
    exact, step, row = first_difference(tokens, expected, spec.prompt_len)
    margin = None if step is None else margin_at(model, expected, spec.prompt_len, row, step)
    return {
        "fidelity": SPECULATIVE,
        "rows_exact": exact,
        "first_divergence_step": step,
        "divergence_margin": margin,
        "fidelity_verdict": fidelity.speculative_verdict(step, margin, spec.dtype),
    }
