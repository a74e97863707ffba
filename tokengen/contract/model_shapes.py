"""Model sizes: what one decode step reads and computes, from layer counts and widths alone, torch-free, so the
sweep's cost model and the memory estimate that one trial asks too (tokengen/contract/memory_estimate.py) size a
model alike. The presets' shapes are the contract's (tokengen/contract/model_facts.py); a local checkpoint is sized from
its config.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokengen.contract.model_facts import PRESETS


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
        return embeddings + self.layers * self.layer_params + final_norm + (0 if self.tied else self.vocab * d)

    @property
    def streamed_params(self) -> int:
        """Weights a decode step reads in full: every layer's and the LM head (an embedding lookup gathers rows)."""
        return self.layers * self.layer_params + self.vocab * self.hidden

    @property
    def size_family(self) -> str:
        """Coarse size class: compile time and model build scale with it, not with the exact count."""
        n = self.params
        return "small" if n < 50e6 else "base" if n < 500e6 else "large" if n < 2e9 else "huge"


PRESET_SHAPES = {
    name: ModelShape(p.arch, p.layers, p.hidden, p.vocab, p.positions, p.intermediate, p.kv_dim, p.tied)
    for name, p in PRESETS.items()
}


def _from_config(facts: dict) -> ModelShape | None:
    """A shape from a Hugging Face config.json: GPT-2 names, else Llama-style names."""
    if "n_embd" in facts:
        d = facts["n_embd"]
        vocab, positions = facts.get("vocab_size", 50257), facts.get("n_positions", 1024)
        return ModelShape("gpt2", facts["n_layer"], d, vocab, positions, facts.get("n_inner") or 4 * d, d, True)
    if "hidden_size" in facts and "num_hidden_layers" in facts:
        d, heads = facts["hidden_size"], facts.get("num_attention_heads", 1)
        kv_dim = (facts.get("num_key_value_heads") or heads) * (d // heads)
        layers, vocab = facts["num_hidden_layers"], facts.get("vocab_size", 32000)
        positions, tied = facts.get("max_position_embeddings", 2048), bool(facts.get("tie_word_embeddings", False))
        return ModelShape("llama", layers, d, vocab, positions, facts.get("intermediate_size", 4 * d), kv_dim, tied)
    return None


def shape_of(model: str) -> ModelShape | None:
    """A preset's shape, a local checkpoint's from its config.json, or None when it cannot be read."""
    if model in PRESET_SHAPES:
        return PRESET_SHAPES[model]
    try:
        return _from_config(json.loads((Path(model) / "config.json").read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
