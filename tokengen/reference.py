"""transformers' own generate(), set up to be comparable with a trial: the peer we must match and beat."""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from tokengen.models import bos_id, eos_ids
from tokengen.spec import TrialSpec

HF_CACHE = {"dynamic": "dynamic", "static": "static"}


def comparable(spec: TrialSpec) -> bool:
    """generate() has no forced-length stop and no full-recompute cache: only these compare."""
    return spec.stop in ("model", "never") and spec.sampling == "greedy" and spec.cache in HF_CACHE


@torch.inference_mode()
def hf_generate(model, spec: TrialSpec) -> torch.Tensor:
    """(B, 1 + steps) tokens from model.generate(do_sample=False) on the trial's BOS prompts."""
    config = model.config
    device = next(model.parameters()).device
    prompts = torch.full((spec.batch_size, 1), bos_id(config), dtype=torch.long, device=device)
    eos = eos_ids(config)
    generation = GenerationConfig(
        do_sample=False,
        max_new_tokens=spec.max_seqlen,
        eos_token_id=eos if spec.stop == "model" else [-1],  # None would fall back to the model's EOS
        pad_token_id=eos[0] if eos else 0,
        cache_implementation=HF_CACHE[spec.cache],
    )
    attention_mask = torch.ones_like(prompts)
    return model.generate(prompts, attention_mask=attention_mask, generation_config=generation)
