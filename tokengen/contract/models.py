"""What the planner knows of a model without building it: its positions, its EOS and BOS ids.

Torch-free and transformers-free (transformers' config classes import torch): a preset's facts are
declared here beside its name, and a local checkpoint's are read from its config.json as JSON.
tokengen.decode.models builds the configs and the weights; tests/test_models.py proves that each
preset's facts here equal its built config's. Nothing here reaches a hub.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from tokengen.contract.spec import SpecError
from tokengen.contract.weight_files import weights_problem

CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
"""How transformers names a decoder LM's architecture (GPT2LMHeadModel, LlamaForCausalLM)."""


@dataclass(frozen=True)
class ModelFacts:
    positions: int  # the most positions the model embeds (n_positions / max_position_embeddings)
    eos_ids: tuple[int, ...]  # ids that end a sequence; the first pads
    vocab_size: int


_GPT2 = ModelFacts(positions=1024, eos_ids=(50256,), vocab_size=50257)
PRESET_FACTS: dict[str, ModelFacts] = {
    "tiny": _GPT2,  # GPT-2 shaped, 2 layers of 128: small enough for a 2-core CI
    "gpt2": _GPT2,  # the article's model (124M)
    "gpt2-medium": _GPT2,
    "gpt2-large": _GPT2,
    "gpt2-xl": _GPT2,
    "llama-tiny": ModelFacts(positions=2048, eos_ids=(2,), vocab_size=32000),
    "llama-1b": ModelFacts(positions=131072, eos_ids=(128001,), vocab_size=128256),  # shaped like Llama-3.2-1B
}
"""The model presets by name (their configs: tokengen.decode.models.MODELS)."""


def is_local_path(model: str) -> bool:
    return model not in PRESET_FACTS and (os.sep in model or model.startswith(".") or Path(model).exists())


def model_facts(model: str) -> ModelFacts:
    """A preset's facts, or a local checkpoint's from its config.json; SpecError naming the fix."""
    if model in PRESET_FACTS:
        return PRESET_FACTS[model]
    if not is_local_path(model):
        raise SpecError(
            f"unknown model {model!r}: use one of {', '.join(PRESET_FACTS)} or a local directory of a causal LM"
        )
    path = Path(model)
    if not (path / "config.json").is_file():
        raise SpecError(f"model path {model!r} has no config.json: give a directory saved with save_pretrained()")
    try:
        config = json.loads((path / "config.json").read_text())
        config = config.get("text_config") or config
    except (OSError, ValueError, AttributeError) as exc:
        raise SpecError(f"model path {model!r} has an unreadable config.json ({exc.__class__.__name__})") from None
    architectures = config.get("architectures") or []
    if architectures and not any(a.endswith(CAUSAL_SUFFIXES) for a in architectures):
        raise SpecError(
            f"model path {model!r} is not a causal LM (architectures={architectures}): give a decoder checkpoint"
        )
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise SpecError(f"model path {model!r} has no weights (*.safetensors or *.bin): save the model there too")
    damaged = weights_problem(path)
    if damaged:
        raise SpecError(f"model path {model!r}: {damaged}")
    eos = config.get("eos_token_id")
    return ModelFacts(
        positions=int(config.get("n_positions") or config.get("max_position_embeddings") or 1 << 30),
        eos_ids=tuple(eos if isinstance(eos, list) else [] if eos is None else [eos]),
        vocab_size=int(config.get("vocab_size") or 0),
    )
