"""Building a trial's model: seeded random weights for a preset, or a local checkpoint, on its device.

Nothing here reaches a hub: presets are built from a config, and a local directory is loaded with
`local_files_only=True`. What the planner needs of a model without torch is in
tokengen.contract.models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from transformers import GPT2Config, LlamaConfig, PretrainedConfig

from tokengen.contract.models import is_local_path
from tokengen.contract.spec import SpecError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

MODELS: dict[str, Callable[[], PretrainedConfig]] = {
    # small enough for a 2-core CI: every test runs on it
    "tiny": lambda: GPT2Config(n_layer=2, n_head=4, n_embd=128),
    # the article's model (124M)
    "gpt2": lambda: GPT2Config(),
    "gpt2-medium": lambda: GPT2Config(n_layer=24, n_head=16, n_embd=1024),
    "gpt2-large": lambda: GPT2Config(n_layer=36, n_head=20, n_embd=1280),
    "gpt2-xl": lambda: GPT2Config(n_layer=48, n_head=25, n_embd=1600),
    # Llama-style (RoPE, RMSNorm, SwiGLU, grouped-query attention), tiny for tests
    "llama-tiny": lambda: LlamaConfig(
        hidden_size=128, intermediate_size=352, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=32000, max_position_embeddings=2048,
    ),
    # shaped like Llama-3.2-1B (1.2B parameters)
    "llama-1b": lambda: LlamaConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
        rope_theta=500000.0, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
    ),
}
"""Preset name -> its config (their facts for the planner: tokengen.contract.models.PRESET_FACTS)."""


def load_config(model: str) -> PretrainedConfig:
    """The model's config, checked to be a causal LM; raises SpecError naming the fix."""
    if model in MODELS:
        return MODELS[model]()
    if not is_local_path(model):
        raise SpecError(
            f"unknown model {model!r}: use one of {', '.join(MODELS)} or a local directory of a causal LM"
        )
    path = Path(model)
    if not (path / "config.json").is_file():
        raise SpecError(f"model path {model!r} has no config.json: give a directory saved with save_pretrained()")
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable config is the user's fix
        raise SpecError(f"model path {model!r} has an unreadable config.json ({exc.__class__.__name__})") from None
    if not is_causal_lm(config):
        raise SpecError(
            f"model path {model!r} is not a causal LM (model_type={config.model_type!r}): give a decoder checkpoint"
        )
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise SpecError(f"model path {model!r} has no weights (*.safetensors or *.bin): save the model there too")
    return config


def is_causal_lm(config: PretrainedConfig) -> bool:
    """A decoder LM by its saved architecture, else by model type (BERT-likes are masked LMs)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if config.architectures:
        causal = {name for names in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values() for name in _as_tuple(names)}
        return any(arch in causal for arch in config.architectures)
    return config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def _as_tuple(names) -> tuple:
    return tuple(names) if isinstance(names, (list, tuple)) else (names,)


def max_positions(config: PretrainedConfig) -> int:
    for name in ("n_positions", "max_position_embeddings"):
        if getattr(config, name, None):
            return int(getattr(config, name))
    return 1 << 30


def eos_ids(config: PretrainedConfig) -> list[int]:
    eos = config.eos_token_id
    if eos is None:
        return []
    return list(eos) if isinstance(eos, (list, tuple)) else [int(eos)]


def bos_id(config: PretrainedConfig) -> int:
    if config.bos_token_id is not None:
        return int(config.bos_token_id)
    ids = eos_ids(config)
    return ids[0] if ids else 0


def build_model(model: str, dtype: str, device: str, seed: int) -> torch.nn.Module:
    """Seed, build in float32, cast, eval: the same weights for the same seed on any machine."""
    from transformers import AutoModelForCausalLM

    config = load_config(model)
    if model in MODELS:
        torch.manual_seed(seed)
        net = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    else:
        net = AutoModelForCausalLM.from_pretrained(model, local_files_only=True, dtype=torch.float32)
    return net.to(device=device, dtype=DTYPES[dtype]).eval()


def weight_bytes(net: torch.nn.Module) -> int:
    """Bytes a decode step streams from memory: every parameter once (tied weights counted once)."""
    seen, total = set(), 0
    for p in net.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total
