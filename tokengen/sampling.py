"""Choosing the next token without asking the host anything.

Greedy is argmax. Top-k sampling uses the exponential-race trick (argmax of p / Exp(1) noise is a
draw from p) instead of torch.multinomial, whose CUDA kernel synchronises with the host. The noise
comes from a generator seeded per run, so every variant draws the same tokens.
"""

from __future__ import annotations

import re
from typing import Callable

import torch

from tokengen.spec import SpecError

SAMPLING_FORMS = "greedy | topk:K[,TEMPERATURE]"

Sampler = Callable[[torch.Tensor], torch.Tensor]


def parse_sampling(sampling: str) -> tuple[int, float] | None:
    """None for greedy, else (k, temperature)."""
    if sampling == "greedy":
        return None
    match = re.fullmatch(r"topk:(\d+)(?:,(\d+(?:\.\d+)?))?", sampling)
    if not match or int(match[1]) < 1 or (match[2] is not None and float(match[2]) <= 0):
        raise SpecError(f"sampling={sampling!r} is not understood: use {SAMPLING_FORMS} (K >= 1, TEMPERATURE > 0)")
    return int(match[1]), float(match[2] or 1.0)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return torch.argmax(logits, dim=-1)  # (B, V) -> (B,)


def make_sampler(sampling: str, seed: int, device) -> Sampler:
    """A fresh sampler for one generation: same seed, same draws."""
    params = parse_sampling(sampling)
    if params is None:
        return greedy
    k, temperature = params
    gen = torch.Generator(device=device).manual_seed(seed)

    def sample_topk_no_sync(logits: torch.Tensor) -> torch.Tensor:
        values, indices = torch.topk(logits.float() / temperature, min(k, logits.shape[-1]), dim=-1)  # (B, k)
        probs = torch.softmax(values, dim=-1)
        noise = torch.empty_like(probs).exponential_(1, generator=gen)
        choice = torch.argmax(probs / noise, dim=-1, keepdim=True)  # (B, 1)
        return indices.gather(-1, choice).squeeze(-1)

    return sample_topk_no_sync
