"""Model sizes: what one decode step reads and computes, from layer counts and widths alone.

The presets' shapes are the contract's (tokengen/contract/models.py: PRESETS, torch-free, the facts
their configs are built from); a local checkpoint is sized from its config.json. Parameter counts are
exact for the presets (gpt2 124,439,808; llama-1b 1,235,814,400) and are checked by the tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokengen.contract.models import PRESETS


@dataclass(frozen=True)
class ModelShape:
    arch: str  # gpt2 | llama
    layers: int
    hidden: int
    vocab: int
    positions: int
    intermediate: int
    kv_dim: int  # key/value width per layer (grouped-query attention: kv heads x head dim)
    tied: bool  # the LM head shares the embedding's weights

    @property
    def layer_params(self) -> int:
        d, i, kv = self.hidden, self.intermediate, self.kv_dim
        if self.arch == "gpt2":  # qkv + proj + fc + proj, biases, two LayerNorms
            return 4 * d * d + 2 * d * i + 9 * d + i
        return 2 * d * d + 2 * d * kv + 3 * d * i + 2 * d  # q, o, k, v, gate/up/down, two RMSNorms

    @property
    def params(self) -> int:
        d = self.hidden
        embeddings = self.vocab * d + (self.positions * d if self.arch == "gpt2" else 0)
        final_norm = 2 * d if self.arch == "gpt2" else d
        head = 0 if self.tied else self.vocab * d
        return embeddings + self.layers * self.layer_params + final_norm + head

    @property
    def streamed_params(self) -> int:
        """Weights a decode step reads in full: every layer's and the LM head (embedding lookups
        gather a few rows only)."""
        return self.layers * self.layer_params + self.vocab * self.hidden

    @property
    def size_family(self) -> str:
        """Coarse size class: compile time and model build scale with it, not with the exact count."""
        n = self.params
        return "small" if n < 50e6 else "base" if n < 500e6 else "large" if n < 2e9 else "huge"


def gpt2_shape(
    layers: int, hidden: int, vocab: int = 50257, positions: int = 1024, intermediate: int | None = None
) -> ModelShape:
    return ModelShape("gpt2", layers, hidden, vocab, positions, intermediate or 4 * hidden, hidden, True)


def llama_shape(
    hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, vocab: int, positions: int, tied: bool
) -> ModelShape:
    return ModelShape("llama", layers, hidden, vocab, positions, intermediate, kv_heads * (hidden // heads), tied)


PRESET_SHAPES: dict[str, ModelShape] = {
    name: ModelShape(p.arch, p.layers, p.hidden, p.vocab, p.positions, p.intermediate, p.kv_dim, p.tied)
    for name, p in PRESETS.items()
}


def _from_config(facts: dict) -> ModelShape | None:
    """A shape from a Hugging Face facts.json: GPT-2 names, else Llama-style names."""
    if "n_embd" in facts:
        return gpt2_shape(
            facts["n_layer"],
            facts["n_embd"],
            facts.get("vocab_size", 50257),
            facts.get("n_positions", 1024),
            facts.get("n_inner"),
        )
    if "hidden_size" in facts and "num_hidden_layers" in facts:
        d, heads = facts["hidden_size"], facts.get("num_attention_heads", 1)
        return llama_shape(
            d,
            facts.get("intermediate_size", 4 * d),
            facts["num_hidden_layers"],
            heads,
            facts.get("num_key_value_heads") or heads,
            facts.get("vocab_size", 32000),
            facts.get("max_position_embeddings", 2048),
            bool(facts.get("tie_word_embeddings", False)),
        )
    return None


def shape_of(model: str) -> ModelShape | None:
    """A preset's shape, a local checkpoint's from its config.json, or None when it cannot be read."""
    if model in PRESET_SHAPES:
        return PRESET_SHAPES[model]
    try:
        return _from_config(json.loads((Path(model) / "config.json").read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
