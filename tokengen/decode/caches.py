"""The three ways a decode step sees the past, behind one interface.

`reset()` starts a new generation. `prefill(model, prompt)` runs decode step 0's forward over the
prompt (B, P) and returns the next-token logits (B, V); `decode(model, tokens, length)` runs a
later step's forward, where `tokens` (B, P + max_seqlen) has its first `length` columns filled,
and returns the logits (B, V) for column `length`. Prefill and decode are apart because they
have different shapes: the generator runs the prefill eagerly and compiles only decode (see
tokengen.decode.loop).

Positions are never passed: GPT-2 and Llama (transformers 5.24) take them from
`cache.get_seq_length()`, which is 0 at the prefill (positions 0..P-1) and the number of columns
already cached afterwards, a device counter for the static cache, so no step number crosses from
the host. Where transformers' own mask code would wait for the device (below), a prebuilt
causal mask is passed instead.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, StaticCache
from transformers.masking_utils import create_causal_mask

MASK_CACHE_KWARG = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"
"""create_causal_mask's cache keyword: `cache` from transformers 5.24.0, `past_key_values` up to 5.23."""


def cache_kwarg(model) -> str:
    """`cache` from transformers 5.24.0; 5.x releases up to 5.23 (5.17 on the GPU image) call it `past_key_values`."""
    return "cache" if "cache" in _parameters(model) else "past_key_values"


def last_logits_only(model) -> dict:
    """`logits_to_keep=1` where the model takes it: a prefill needs the last position's logits only
    (B, 1, V), not (B, P, V), as generate() asks too."""
    return {"logits_to_keep": 1} if "logits_to_keep" in _parameters(model) else {}


def _parameters(model):
    return inspect.signature(getattr(model, "_orig_mod", model).forward).parameters


def kv_heads_and_dim(config) -> tuple[int, int]:
    """(key/value heads, head dim) of a layer's cache: grouped-query models keep fewer heads than they attend with."""
    text = config.get_text_config(decoder=True)
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    return heads, getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads


def causal_mask(model, length: int) -> torch.Tensor | None:
    """(1, 1, length, length) causal mask in the format of the model's attention (bool for sdpa,
    additive for eager), built once per trial; slices of it are passed to the model, which then
    uses them as they are.

    Why: with no cache (and with a static cache's multi-token prefill), transformers 5.17-5.24's
    mask code reads a device tensor on the host inside every forward (`find_packed_sequence_indices`'
    `.all()`; `q_offset == 0` in `_ignore_causal_mask_sdpa`), a hidden sync. None where a simple
    causal mask would be wrong or unusable (sliding-window layers, flash or flex attention): those
    models build their own.
    """
    config = model.config.get_text_config(decoder=True)
    if getattr(config, "sliding_window", None) or set(getattr(config, "layer_types", None) or ()) - {"full_attention"}:
        return None
    weight = next(model.parameters())
    shape_only = torch.empty(1, length, 0, dtype=weight.dtype, device=weight.device)  # (1, T, 0): read for its shape
    mask = create_causal_mask(
        config=model.config,
        inputs_embeds=shape_only,
        attention_mask=None,
        **{MASK_CACHE_KWARG: None},
        position_ids=None,
        allow_is_causal_skip=False,  # no position ids: no packed-sequence check here either
    )
    return mask if isinstance(mask, torch.Tensor) and mask.ndim == 4 else None


class NoCache:
    """The article's baseline: recompute the whole prefix every step, O(N^2) in total, every
    position's logits included (as the article's loop computes them)."""

    def __init__(self, model, batch_size: int, prompt_len: int, max_seqlen: int):
        self.mask = causal_mask(model, prompt_len + max_seqlen)  # (1, 1, T, T) or None

    def reset(self) -> None:
        pass

    def prefill(self, model, prompt: torch.Tensor) -> torch.Tensor:
        return self._forward(model, prompt)

    def decode(self, model, tokens: torch.Tensor, length: int) -> torch.Tensor:
        return self._forward(model, tokens[:, :length])

    def _forward(self, model, seq: torch.Tensor) -> torch.Tensor:
        n = seq.shape[1]
        mask = None if self.mask is None else self.mask[:, :, :n, :n]  # (1, 1, n, n)
        out = model(seq, attention_mask=mask, use_cache=False)
        return out.logits[:, -1, :]  # (B, n, V) -> (B, V)


class DynamicKV:
    """transformers' DynamicCache: the prefill stores P columns, then keys and values grow by one
    column per step (torch.cat)."""

    def __init__(self, model, batch_size: int, prompt_len: int, max_seqlen: int):
        self.config = model.config
        self.cache = None
        self.kwarg = cache_kwarg(model)
        self.prefill_kwargs = last_logits_only(model)

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.config)

    def prefill(self, model, prompt: torch.Tensor) -> torch.Tensor:
        return self._forward(model, prompt, self.prefill_kwargs)

    def decode(self, model, tokens: torch.Tensor, length: int) -> torch.Tensor:
        return self._forward(model, tokens[:, length - 1 : length])  # (B, 1): the newest token only

    def _forward(self, model, new: torch.Tensor, extra: dict | None = None) -> torch.Tensor:
        out = model(new, use_cache=True, **{self.kwarg: self.cache}, **(extra or {}))
        return out.logits[:, -1, :]  # (B, 1 or P, V) -> (B, V)


class StaticKV(DynamicKV):
    """transformers' StaticCache, sized to P + max_seqlen once per trial and zeroed per generation.

    Keeping one cache for the whole trial keeps its tensors at fixed addresses, which CUDA graphs
    (compile=reduce-overhead) need; they are allocated here, outside any compiled region, so they
    are marked static (lazily, inside the first compiled call, they would not be). The position
    comes from the cache's own device counter: the step number never travels host-to-device.
    The prefill passes its (1, 1, P, P + max_seqlen) mask, since transformers would compare that
    counter with 0 on the host to choose one.
    """

    def __init__(self, model, batch_size: int, prompt_len: int, max_seqlen: int):
        super().__init__(model, batch_size, prompt_len, max_seqlen)
        length = prompt_len + max_seqlen  # the last token is never fed back: one column to spare
        self.cache = StaticCache(config=self.config, max_cache_len=length)
        heads, head_dim = kv_heads_and_dim(self.config)
        weight = next(model.parameters())
        self.cache.early_initialization(batch_size, heads, head_dim, weight.dtype, weight.device)
        mask = causal_mask(model, length)
        self.prefill_mask = None if mask is None else mask[:, :, :prompt_len, :].clone()  # (1, 1, P, T); frees (T, T)

    def reset(self) -> None:
        self.cache.reset()

    def prefill(self, model, prompt: torch.Tensor) -> torch.Tensor:
        return self._forward(model, prompt, {**self.prefill_kwargs, "attention_mask": self.prefill_mask})
