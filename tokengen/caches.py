"""The three ways a decode step sees the past, behind one interface.

`reset()` starts a new generation; `logits(model, tokens, step)` runs the forward pass of decode
step `step` (0-based) over `tokens` (B, 1 + max_seqlen), whose columns 0..step are filled, and
returns the next-token logits (B, V).
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PretrainedConfig, StaticCache


def cache_kwarg(model) -> str:
    """`cache` in transformers 5.24; older 5.x releases (as on some GPU images) call it `past_key_values`."""
    forward = getattr(model, "_orig_mod", model).forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


class NoCache:
    """The article's baseline: recompute the whole prefix every step, O(N^2) in total."""

    def __init__(self, config: PretrainedConfig, max_seqlen: int):
        pass

    def reset(self) -> None:
        pass

    def logits(self, model, tokens: torch.Tensor, step: int) -> torch.Tensor:
        out = model(tokens[:, : step + 1], use_cache=False)
        return out.logits[:, -1, :]  # (B, step+1, V) -> (B, V)


class DynamicKV:
    """transformers' DynamicCache: keys and values grow by one column per step (torch.cat)."""

    def __init__(self, config: PretrainedConfig, max_seqlen: int):
        self.config = config
        self.cache = None
        self.kwarg = None

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.config)

    def logits(self, model, tokens: torch.Tensor, step: int) -> torch.Tensor:
        self.kwarg = self.kwarg or cache_kwarg(model)
        out = model(tokens[:, step : step + 1], use_cache=True, **{self.kwarg: self.cache})
        return out.logits[:, -1, :]


class StaticKV(DynamicKV):
    """transformers' StaticCache, sized to max_seqlen once per trial and zeroed per generation.

    Keeping one cache for the whole trial keeps its tensors at fixed addresses, which CUDA graphs
    (compile=reduce-overhead) need; the position comes from the cache's own device counter, so the
    step number never travels host-to-device.
    """

    def __init__(self, config: PretrainedConfig, max_seqlen: int):
        super().__init__(config, max_seqlen)
        self.cache = StaticCache(config=config, max_cache_len=max_seqlen)

    def reset(self) -> None:
        self.cache.reset()


CACHES = {"none": NoCache, "dynamic": DynamicKV, "static": StaticKV}
