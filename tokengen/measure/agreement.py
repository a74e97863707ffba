"""How far a trial with equivalent or lossy values strays from the reference model, on its own workload.

The reference is the same model at the same point and seed with every such value at its plain setting
(unquantized weights, torch's own attention choice). It generates the workload's rows once (a dynamic
KV cache, eager; the trial's prompts, sampling and stop rule). Then:

- teacher-forced: the trial's model reads the reference's tokens in one forward (inside the trial's step
  contexts), so one differing token does not cascade: top-1 agreement per step, the largest logit
  difference, the mean KL(reference || trial), and the reference's median top-1/top-2 margin (how
  decisive its logits are: tiny on random weights);
- free-running (batch workloads): rows of the trial's own last run whose generated tokens match the
  reference's exactly, and the first step where any row differs.

A speculative trial (speculative decoding) is proven against its plain twin instead, bit for bit
(tokengen/measure/speculation_proof.py).
"""

from __future__ import annotations

import dataclasses

import torch

from tokengen import models
from tokengen.contract import fidelity
from tokengen.contract.declarations import EXACT, KNOBS, SPECULATIVE, fidelity_of, plain
from tokengen.contract.spec import TrialSpec
from tokengen.knobs import around_steps

LOGIT_BYTES_PER_CHUNK = 256 << 20  # rows forwarded together: two (rows, T, V) float32 logits under this


def reference_spec(spec: TrialSpec) -> TrialSpec:
    """The trial's point (one batch of its rows) with every knob plain but the cache: the eager loop on a
    dynamic KV cache, which returns the full recompute's tokens at a fraction of its time."""
    return dataclasses.replace(spec, **{**{k: plain(k).name for k in KNOBS}, "cache": "dynamic"}, requests=0)


def measure(spec: TrialSpec, model: torch.nn.Module, tokens: torch.Tensor | None, gate: float) -> dict:
    """The record's fidelity fields for a trial whose values are not all exact (empty for an exact one).
    `model` is the trial's own (quantized, uncompiled); `tokens` its last run's (B, P + steps), or None."""
    kind = fidelity_of(spec.knobs)
    if kind == EXACT:
        return {}
    if kind == SPECULATIVE:  # proven against its plain twin's tokens instead
        from tokengen.measure import speculation_proof

        return speculation_proof.measure(spec, model, tokens)
    from tokengen.engines import make_generator

    reference = reference_spec(spec)
    ref_model = models.build_model(reference.model, reference.dtype, reference.device, reference.seed)
    expected = make_generator(ref_model, reference)().tokens  # (B, P + steps)
    figures = teacher_forced(ref_model, around_steps(model, spec), expected, spec.prompt_len)
    del ref_model
    figures.update(free_running(tokens, expected, spec.prompt_len) if tokens is not None and not spec.requests else {})
    return {
        "fidelity": kind,
        "fidelity_gate": gate,
        **figures,
        "fidelity_verdict": fidelity.verdict(
            kind, figures["top1_agreement"], gate, spec.model, figures["top1_margin_median"]
        ),
    }


@torch.inference_mode()
def teacher_forced(reference, candidate, tokens: torch.Tensor, prompt_len: int) -> dict:
    """Both models fed `tokens` (B, T): the logits that predict tokens[:, P:], compared step by step."""
    rows, length = tokens.shape
    vocab = reference.config.vocab_size
    chunk = max(1, LOGIT_BYTES_PER_CHUNK // (2 * length * vocab * 4))
    agree, count, worst, kl_sum, margins = 0, 0, 0.0, 0.0, []
    for start in range(0, rows, chunk):
        seq = tokens[start : start + chunk]
        ref = reference(seq).logits[:, prompt_len - 1 : -1].float()  # (b, steps, V)
        mine = candidate(seq).logits[:, prompt_len - 1 : -1].float()
        agree += int((ref.argmax(-1) == mine.argmax(-1)).sum())
        count += ref.shape[0] * ref.shape[1]
        worst = max(worst, float((ref - mine).abs().max()))
        log_ref, log_mine = torch.log_softmax(ref.double(), -1), torch.log_softmax(mine.double(), -1)
        kl_sum += float((log_ref.exp() * (log_ref - log_mine)).sum())
        top2 = ref.topk(2, dim=-1).values  # (b, steps, 2)
        margins.append((top2[..., 0] - top2[..., 1]).flatten())
    return {
        "top1_agreement": agree / count if count else None,
        "max_logit_diff": worst,
        "kl_divergence": kl_sum / count if count else None,
        "top1_margin_median": float(torch.cat(margins).median()) if margins else None,
    }


def free_running(tokens: torch.Tensor, expected: torch.Tensor, prompt_len: int) -> dict:
    """Rows whose generated tokens equal the reference's (over the shorter of the two), and the first
    decode step where some row differs (None where none does)."""
    length = min(tokens.shape[1], expected.shape[1])
    differs = tokens[:, prompt_len:length].cpu() != expected[:, prompt_len:length].cpu()  # (B, steps)
    rows_differ = differs.any(dim=1)
    first = int(differs.any(dim=0).nonzero()[0]) if bool(rows_differ.any()) else None
    return {"rows_exact": int((~rows_differ).sum()), "first_divergence_step": first}
