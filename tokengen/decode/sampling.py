"""Choosing the next token without asking the host anything.

Greedy is argmax. Top-k sampling uses the exponential-race trick (argmax of p / Exp(1) noise is a
draw from p) instead of torch.multinomial, whose CUDA kernel synchronises with the host. The noise
comes from a generator seeded per run, so every variant draws the same tokens.
"""

from __future__ import annotations

from typing import Callable

import torch

from tokengen.contract.forms import parse_sampling

Sampler = Callable[[torch.Tensor], torch.Tensor]


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
