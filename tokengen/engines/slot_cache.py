"""A KV cache with one write position per slot: what continuous batching needs from a cache.

Why our own: transformers' StaticCache keeps one write position (`cumulative_length`) for the whole
batch, and GPT-2 (5.24) takes no per-row cache position, so a slot given a new request could not
start again at position 0 while its neighbours go on. Here each layer's keys and values are one
static buffer (S, H, T + P - 1, D), allocated once per trial (fixed addresses, so torch.compile and
CUDA graphs apply); the model writes through a tiny `transformers.Cache` whose `update` scatters the
new columns at per-slot indices and returns the whole buffer, and the mask says what each query sees.

- decode (S, 1): every slot feeds its newest token at its own position, writes that column and
  attends to its columns up to it (a previous request's stale columns beyond it are masked).
- admission (S, P): admitted slots feed their prompt at positions 0..P-1 (columns 0..P-1, causal)
  while every other slot takes its decode step in the same forward: its token in query 0, written at
  its position; its P - 1 padding queries write to spare columns T..T+P-2 that no mask ever shows.
  One forward admits any number of requests and moves every other slot on: no slot waits for a
  prefill, and the shape is fixed, (S, P), whatever the number admitted. A request of a shorter prompt
  (p < P, a trace's) fills columns 0..p-1 and writes its padding queries to the spare columns too.

Positions and masks reach the model explicitly (`position_ids`, a 4-D `attention_mask`, which
transformers uses as it is, so its mask code and its host syncs never run). Full-attention layers
only (GPT-2, Llama): a sliding window would need its own mask.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from tokengen.decode.caches import cache_kwarg, kv_heads_and_dim


class _SlotLayer(CacheLayerMixin):
    """One layer's buffers: `update` scatters the new columns at the cache's current write index."""

    is_compileable = True

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, owner: "SlotKV"):
        super().__init__()
        self.keys, self.values, self.owner = keys, values, owner  # (S, H, T + P - 1, D) each
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:
        pass  # allocated up front, outside any compiled region

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        slots, heads, length, dim = key_states.shape  # (S, H, q, D), q = 1 or P
        index = self.owner.write_at[:, None, :, None].expand(slots, heads, length, dim)
        self.keys.scatter_(2, index, key_states)
        self.values.scatter_(2, index, value_states)
        return self.keys, self.values  # what a query may see, its mask says

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[2], 0

    def get_seq_length(self) -> int:
        return 0  # never asked: positions are always passed

    def get_max_length(self) -> int:
        return self.keys.shape[2]


class _SlotWriter(Cache):
    def __init__(self, owner: "SlotKV"):
        super().__init__(layers=[_SlotLayer(k, v, owner) for k, v in owner.buffers])


class SlotKV:
    """Per-slot KV buffers for `slots` slots of `length` usable columns (prompt and fed tokens), each
    slot's next column (`positions`), and the two steps that write them."""

    def __init__(self, model, slots: int, prompt_len: int, length: int):
        text = model.config.get_text_config(decoder=True)
        heads, head_dim = kv_heads_and_dim(model.config)
        weight = next(model.parameters())
        shape = (slots, heads, length + prompt_len - 1, head_dim)  # the last P - 1 columns: admission's spares
        self.buffers = [(weight.new_zeros(shape), weight.new_zeros(shape)) for _ in range(text.num_hidden_layers)]
        self.positions = torch.zeros(slots, dtype=torch.long, device=weight.device)  # (S,) each slot's next column
        for tensor in [t for pair in self.buffers for t in pair] + [self.positions]:
            torch._dynamo.mark_static_address(tensor)  # updated in place: CUDA graphs keep their addresses
        self.write_at = self.positions[:, None]  # (S, q): columns the next forward writes
        self.columns = torch.arange(shape[2], device=weight.device)  # (T + P - 1,)
        self.length, self.prompt_len = length, prompt_len
        self.additive = model.config._attn_implementation == "eager"  # eager adds its mask; sdpa takes bools
        self.dtype = weight.dtype
        self.kwarg = cache_kwarg(model)
        self.cache = _SlotWriter(self)

    def _mask(self, allowed: torch.Tensor) -> torch.Tensor:
        if not self.additive:
            return allowed
        zero = torch.zeros((), dtype=self.dtype, device=allowed.device)
        return zero.masked_fill(~allowed, torch.finfo(self.dtype).min)

    def _advance(self, admitted: torch.Tensor | None = None, lengths: torch.Tensor | None = None) -> None:
        """Next columns: an admitted slot's is its prompt's length, every other slot's one further, held at
        the last usable column (a slot past its end writes there until it is refilled)."""
        self.positions.add_(1).clamp_(max=self.length - 1)
        if admitted is not None:
            self.positions.copy_(torch.where(admitted, lengths, self.positions))

    def decode(self, model, last: torch.Tensor) -> torch.Tensor:
        """Every slot feeds last (S,) at its position; logits (S, V)."""
        self.write_at = self.positions[:, None]  # (S, 1)
        allowed = self.columns[None, :] <= self.positions[:, None]  # (S, T + P - 1)
        out = model(
            last[:, None],
            position_ids=self.positions[:, None],
            attention_mask=self._mask(allowed)[:, None, None],
            use_cache=True,
            **{self.kwarg: self.cache},
        )
        self._advance()
        return out.logits[:, -1, :]  # (S, 1, V) -> (S, V)

    def admit(
        self, model, tokens: torch.Tensor, admitted: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """One forward over tokens (S, P): admitted (S,) slots' prompts (each `lengths` (S,) long, P where
        None), and every other slot's decode step (its token in column 0); logits (S, V) at each row's
        last real token. Run eagerly on the model's decoder, so the LM head projects one position per row, not P."""
        prompt_len = tokens.shape[1]
        if lengths is None:
            lengths = torch.full_like(self.positions, prompt_len)
        query = self.columns[:prompt_len]  # (P,)
        spare = self.length + query - 1  # (P,): columns no mask shows (query 0's entry is never used)
        real = admitted[:, None] & (query[None, :] < lengths[:, None])  # (S, P): a prompt's own ids
        self.write_at = torch.where(real, query, torch.where(query == 0, self.positions[:, None], spare))
        positions = torch.where(admitted[:, None], query, self.positions[:, None])  # (S, P): padding repeats the slot's
        seen = self.columns[None, None, :]  # (1, 1, T + P - 1)
        allowed = torch.where(
            admitted[:, None, None],
            seen <= query[None, :, None],  # a prompt: causal
            seen <= self.positions[:, None, None],
        )  # the others: up to their position
        out = model.base_model(
            tokens,
            position_ids=positions,
            attention_mask=self._mask(allowed)[:, None],
            use_cache=True,
            **{self.kwarg: self.cache},
        )  # allowed: (S, P, T + P - 1)
        last = torch.where(admitted, lengths - 1, 0)  # (S,)
        hidden = out.last_hidden_state.take_along_dim(last[:, None, None], dim=1)  # (S, 1, E)
        self._advance(admitted, lengths)
        return model.get_output_embeddings()(hidden)[:, 0, :]  # (S, V)
