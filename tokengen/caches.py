"""The three ways a decode step sees the past, behind one interface.

`reset()` starts a new generation; `logits(model, tokens, step)` runs the forward pass of decode
step `step` (0-based) over `tokens` (B, 1 + max_seqlen), whose columns 0..step are filled, and
returns the next-token logits (B, V).
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, StaticCache


def cache_kwarg(model) -> str:
    """`cache` in transformers 5.24; older 5.x releases (as on some GPU images) call it `past_key_values`."""
    forward = getattr(model, "_orig_mod", model).forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


class NoCache:
    """The article's baseline: recompute the whole prefix every step, O(N^2) in total."""

    def __init__(self, model, batch_size: int, max_seqlen: int):
        pass

    def reset(self) -> None:
        pass

    def logits(self, model, tokens: torch.Tensor, step: int) -> torch.Tensor:
        out = model(tokens[:, : step + 1], use_cache=False)
        return out.logits[:, -1, :]  # (B, step+1, V) -> (B, V)


class DynamicKV:
    """transformers' DynamicCache: keys and values grow by one column per step (torch.cat)."""

    def __init__(self, model, batch_size: int, max_seqlen: int):
        self.config = model.config
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
    (compile=reduce-overhead) need; they are allocated here, outside any compiled region, so they
    are marked static (lazily, inside the first compiled call, they would not be). The position
    comes from the cache's own device counter: the step number never travels host-to-device.
    """

    def __init__(self, model, batch_size: int, max_seqlen: int):
        super().__init__(model, batch_size, max_seqlen)
        self.cache = StaticCache(config=self.config, max_cache_len=max_seqlen)
        text = self.config.get_text_config(decoder=True)
        heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        weight = next(model.parameters())
        self.cache.early_initialization(batch_size, heads, head_dim, weight.dtype, weight.device)

    def reset(self) -> None:
        self.cache.reset()


CACHES = {"none": NoCache, "dynamic": DynamicKV, "static": StaticKV}
