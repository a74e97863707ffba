"""The trial's prompts: BOS, then prompt_len - 1 seeded token ids, a different prompt on every row.

A random-weight model decodes degenerately from one BOS (every row the same), so a check on rows
needs rows that start apart. The ids come from their own CPU generator, seeded from the trial's
seed and a fixed label: drawing them never moves the global RNG that builds the weights, so the
weights do not depend on prompt_len, and the same spec gives the same prompts on every machine
and every variant (transformers' generate() included, see tokengen.engines.hf_generate). prompt_len = 1 is
the article's setting: BOS alone.
"""

from __future__ import annotations

import hashlib

import torch
from transformers import PretrainedConfig

from tokengen.decode.models import bos_id


def stream_seed(seed: int, label: str) -> int:
    """A seed for one named random stream of the trial, so prompts and target lengths (both from
    `seed`) are not the same draws read two ways."""
    digest = hashlib.sha256(f"{seed}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def prompt_ids(config: PretrainedConfig, batch_size: int, prompt_len: int, seed: int, device="cpu") -> torch.Tensor:
    """(B, P) prompts: column 0 is BOS; column 1 is drawn without replacement, so rows differ; the
    rest are uniform over the vocabulary. Drawn on the CPU, then moved to `device`.

    Only BOS and the vocabulary size shape the draw, so a checkpoint that differs in its EOS ids
    gets the same prompts. An EOS id inside a prompt ends nothing: only generated tokens are
    checked for EOS, here and in generate()."""
    bos = torch.full((batch_size, 1), bos_id(config), dtype=torch.long)  # (B, 1)
    if prompt_len == 1:
        return bos.to(device)
    vocab = config.get_text_config(decoder=True).vocab_size
    gen = torch.Generator().manual_seed(stream_seed(seed, "prompts"))
    first = torch.randperm(vocab, generator=gen)[:batch_size]  # (B,) distinct while B <= V
    rest = torch.randint(vocab, (batch_size, prompt_len - 2), generator=gen)  # (B, P-2)
    drawn = torch.cat([first[:, None], rest], dim=1)  # (B, P-1)
    return torch.cat([bos, drawn], dim=1).to(device)
