"""How sequences end: the model's own EOS, never, or a seeded per-sequence target length.

A random-weight model almost never says EOS, so early stopping is studied by forcing it: each
sequence draws a target length from a seeded distribution and EOS is written on the device at that
step, with no host sync. Ended sequences are padded with EOS, as transformers' generate() does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tokengen.contract.forms import parse_stop


def target_lengths(stop: str, batch_size: int, max_seqlen: int, seed: int) -> torch.Tensor | None:
    """Each sequence's length in generated tokens (EOS included), drawn on the CPU from the seed."""
    kind, params = parse_stop(stop)
    if kind in ("model", "never"):
        return None
    gen = torch.Generator().manual_seed(seed)
    if kind == "fixed":
        lengths = torch.full((batch_size,), params[0], dtype=torch.float64)
    elif kind == "uniform":
        lo, hi = params
        lengths = torch.randint(lo, hi + 1, (batch_size,), generator=gen).double()
    else:
        median, sigma = params
        normal = torch.randn(batch_size, generator=gen, dtype=torch.float64)
        lengths = torch.exp(math.log(median) + sigma * normal).round()
    return lengths.clamp(1, max_seqlen).to(torch.int64)


@dataclass
class StopPolicy:
    """Pads ended sequences with EOS and marks them finished; every operation stays on the device.

    With a length distribution the target alone ends a sequence: an EOS the model says earlier is
    an ordinary token, so lengths are exactly the drawn ones whatever the weights.
    """

    kind: str  # model | never | fixed | uniform | lognormal
    eos: torch.Tensor  # (n_eos,) ids that end a sequence; eos[0] pads
    targets: torch.Tensor | None  # (B,) forced lengths, or None

    @classmethod
    def build(cls, stop: str, eos_ids: list[int], batch_size: int, max_seqlen: int, seed: int, device) -> "StopPolicy":
        kind, _ = parse_stop(stop)
        targets = target_lengths(stop, batch_size, max_seqlen, seed)
        return cls(
            kind=kind,
            eos=torch.tensor(eos_ids or [-1], dtype=torch.long, device=device),
            targets=None if targets is None else targets.to(device),
        )

    def apply(self, new_tokens: torch.Tensor, finished: torch.Tensor, step: int) -> torch.Tensor:
        """new_tokens (B,) of decode step `step` (0-based) -> the tokens to keep; updates finished in place."""
        if self.kind == "never":
            return new_tokens
        if self.kind == "model":
            new_tokens = torch.where(finished, self.eos[0], new_tokens)
            finished |= torch.isin(new_tokens, self.eos)
            return new_tokens
        finished |= self.targets <= step + 1
        return torch.where(finished, self.eos[0], new_tokens)


def row_lengths(
    stop: str, seed: int, max_seqlen: int, prompt_len: int, tokens: torch.Tensor, eos: list[int], limit: int
) -> torch.Tensor:
    """(rows,) generated tokens of each row of `tokens` (rows, prompt_len + generated) up to its end,
    its EOS included, at most `limit`: a drawn length (an earlier EOS is an ordinary token there),
    the first EOS under stop=model, every token under stop=never. What a user receives; padding not."""
    rows = tokens.shape[0]
    kind, _ = parse_stop(stop)
    if kind == "never":
        return torch.full((rows,), limit)
    targets = target_lengths(stop, rows, max_seqlen, seed)
    if targets is not None:
        return targets.clamp(max=limit)
    generated = tokens[:, prompt_len : prompt_len + limit].cpu()  # (rows, <= limit)
    said = torch.isin(generated, torch.tensor(eos or [-1]))
    return torch.where(said.any(dim=1), said.int().argmax(dim=1) + 1, torch.full((rows,), limit))
