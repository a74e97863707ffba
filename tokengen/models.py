"""Building a trial's model: seeded random weights for a preset, a trained preset's checkpoint, or a local
checkpoint, on its device.

Nothing here reaches a hub: presets are built from a config, and a local directory is loaded with
`local_files_only=True` and `trust_remote_code=False` (a checkpoint's own code never runs). A trained preset
(tokengen/contract/trained.py) is built once on this machine where it is missing (tokengen.train.ensure, said in
one line), then loaded as any local checkpoint is, with the same checks. What the planner needs of a model without
torch is in tokengen.contract.model_facts.
"""

from __future__ import annotations

import functools
import pickle
import sys
import time
import warnings
from typing import Callable

import torch
from transformers import GPT2Config, LlamaConfig, PretrainedConfig

from tokengen.contract.model_facts import PRESETS, Preset, checkpoint_dir, model_facts
from tokengen.contract.spec import DTYPE_BYTES, SpecError
from tokengen.contract.trained import checkpoint_facts, find, trained

DTYPES = {name: getattr(torch, name) for name in DTYPE_BYTES}  # each declared dtype as torch names it


def preset_config(preset: Preset) -> PretrainedConfig:
    """A preset's transformers config, built from its declared facts (tokengen.contract.model_facts.PRESETS)."""
    eos = preset.eos_ids[0] if len(preset.eos_ids) == 1 else list(preset.eos_ids)
    ids = dict(bos_token_id=preset.bos_id, eos_token_id=eos, tie_word_embeddings=preset.tied)
    if preset.arch == "gpt2":
        return GPT2Config(
            n_layer=preset.layers,
            n_head=preset.heads,
            n_embd=preset.hidden,
            n_inner=preset.intermediate,
            vocab_size=preset.vocab,
            n_positions=preset.positions,
            **({"activation_function": preset.activation} if preset.activation else {}),
            **ids,
        )
    rope = {} if preset.rope_theta is None else {"rope_theta": preset.rope_theta}
    return LlamaConfig(
        hidden_size=preset.hidden,
        intermediate_size=preset.intermediate,
        num_hidden_layers=preset.layers,
        num_attention_heads=preset.heads,
        num_key_value_heads=preset.kv_heads,
        vocab_size=preset.vocab,
        max_position_embeddings=preset.positions,
        **rope,
        **ids,
    )


MODELS: dict[str, Callable[[], PretrainedConfig]] = {
    name: functools.partial(preset_config, preset) for name, preset in PRESETS.items()
}
"""Preset name -> its config (their facts: tokengen.contract.model_facts.PRESETS)."""


def load_config(model: str) -> PretrainedConfig:
    """The model's config, checked to be a causal LM whose weights are there and whole (the contract's
    check, tokengen.contract.model_facts.model_facts, and transformers' own reading); SpecError naming the fix."""
    if model in MODELS:
        return MODELS[model]()
    path = checkpoint_dir(model)
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable config is the user's fix
        raise SpecError(f"model path {model!r} has an unreadable config.json ({exc.__class__.__name__})") from None
    if not is_causal_lm(config):
        raise SpecError(
            f"model path {model!r} is not a causal LM (model_type={config.model_type!r}): give a decoder checkpoint"
        )
    model_facts(model)  # the weights: there, and whole
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
    return (
        config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        and config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    )


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
    """Seed, build in float32, cast, eval: the same weights for the same seed on any machine (a trained preset's
    and a local checkpoint's whatever the seed)."""
    from transformers import AutoModelForCausalLM

    if trained(model):
        net = load_trained(model)
    elif model in MODELS:
        torch.manual_seed(seed)
        net = AutoModelForCausalLM.from_config(load_config(model), dtype=torch.float32)
    else:
        net = load_checkpoint(model)
    return net.to(device=device, dtype=DTYPES[dtype]).eval()


def load_checkpoint(model: str) -> torch.nn.Module:
    """A local checkpoint in float32, after the contract's checks and transformers' reading of its config."""
    from transformers import AutoModelForCausalLM

    load_config(model)
    try:
        with warnings.catch_warnings():  # torch's note on a pickle's protocol, before it refuses the file
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return AutoModelForCausalLM.from_pretrained(
                model, local_files_only=True, trust_remote_code=False, dtype=torch.float32
            )
    except pickle.UnpicklingError as exc:  # torch's weights-only loader refused a pickled .bin
        raise SpecError(
            f"model path {model!r}: torch refused its pickled .bin weights ({str(exc).split('.')[0]}): "
            "a .bin may carry code; save the model as model.safetensors with save_pretrained()"
        ) from None


_said: set[str] = set()  # trained checkpoints this process has named: once each (the fidelity reference loads again)


def load_trained(model: str) -> torch.nn.Module:
    """A trained preset's checkpoint, built first where this machine has none (tokengen.train.ensure), then loaded
    as a local checkpoint; its folder, held-out loss and the look-up's and load's time said once per process."""
    from tokengen.train import ensure

    started = time.perf_counter()
    ensure([model], say=lambda line: print(line, file=sys.stderr, flush=True))
    path = find(model)
    if path is None:
        raise SpecError(f"model {model}: no whole checkpoint after its build: run python -m tokengen.train {model}")
    net = load_checkpoint(str(path))
    if str(path) not in _said:
        _said.add(str(path))
        loss = checkpoint_facts(path).get("model_heldout_loss")
        said = "no held-out loss recorded" if loss is None else f"held-out loss {loss:.3f} nats/byte"
        print(
            f"model {model}: trained checkpoint {path} ({said}), looked up and loaded in "
            f"{time.perf_counter() - started:.2f} s",
            file=sys.stderr,
            flush=True,
        )
    return net


def weight_bytes(net: torch.nn.Module) -> int:
    """Bytes a decode step streams from memory: every parameter once (tied weights counted once), a
    quantized one as the tensors it holds (torchao's packed data and its scales, not the dtype it stands for)."""
    seen, total = set(), 0
    for p in net.parameters():
        for tensor in stored_tensors(p.data):
            if tensor.data_ptr() not in seen:
                seen.add(tensor.data_ptr())
                total += tensor.numel() * tensor.element_size()
    return total


def stored_tensors(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The torch.Tensor objects a tensor keeps in memory: itself, or a subclass's inner tensors (__tensor_flatten__)."""
    if type(tensor) in (torch.Tensor, torch.nn.Parameter) or not hasattr(tensor, "__tensor_flatten__"):
        return [tensor]
    names, _ = tensor.__tensor_flatten__()
    return [inner for name in names for inner in stored_tensors(getattr(tensor, name))]
