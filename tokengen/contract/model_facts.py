"""What the planner knows of a model without building it: its positions, its EOS and BOS ids, and
for a preset its shape; and whether a local checkpoint is one at all.

Torch-free and transformers-free (transformers' config classes import torch): a preset's shape and
ids are declared here once, beside its name, and a local checkpoint's facts are read from its
config.json as JSON. tokengen.models builds the presets' configs from the same entries (and
checks a local checkpoint with `model_facts` too); tokengen/contract/model_shapes.py sizes the presets by
them; tests/tokengen/test_models.py proves that each preset's facts here equal its built config's. Nothing
here reaches a hub.
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


@dataclass(frozen=True)
class Preset:
    """A preset model's architecture, sizes and ids, declared once: tokengen.models builds its
    transformers config from them and tokengen/contract/model_shapes.py sizes a decode step by them."""

    arch: str  # gpt2 | llama: the transformers config that builds it
    layers: int
    hidden: int
    heads: int  # attention (query) heads
    kv_heads: int  # key/value heads: fewer than `heads` under grouped-query attention
    intermediate: int  # the MLP's width
    vocab: int
    positions: int  # the most positions the model embeds
    tied: bool  # the LM head shares the embedding's weights
    bos_id: int
    eos_ids: tuple[int, ...]  # ids that end a sequence; the first pads
    rope_theta: float | None = None  # llama: RoPE's base; None: LlamaConfig's default
    trained: bool = False  # trained here, not seeded random weights (its recipe: tokengen/contract/trained.py)
    activation: str | None = None  # gpt2: the MLP's activation_function; None: GPT2Config's own (gelu_new)

    @property
    def kv_dim(self) -> int:
        """Key/value width per layer: kv heads x head width."""
        return self.kv_heads * (self.hidden // self.heads)


def _gpt2(layers: int, hidden: int, heads: int) -> Preset:
    """GPT-2's family: 50257 ids, 1024 positions, an MLP 4x wide, the head tied, <|endoftext|> both ends."""
    return Preset(
        "gpt2",
        layers,
        hidden,
        heads,
        heads,
        4 * hidden,
        vocab=50257,
        positions=1024,
        tied=True,
        bos_id=50256,
        eos_ids=(50256,),
    )


def _bytes(layers: int, hidden: int, heads: int, positions: int) -> Preset:
    """A byte-level GPT-2 trained here: 256 byte values and one end-of-document id (257), BOS and EOS both."""
    return Preset(
        "gpt2",
        layers,
        hidden,
        heads,
        heads,
        4 * hidden,
        vocab=257,
        positions=positions,
        tied=True,
        bos_id=256,
        eos_ids=(256,),
        trained=True,
        activation="gelu",  # exact GELU, one kernel: 15% off a CPU training step against gelu_new's five
    )


PRESETS: dict[str, Preset] = {
    "tiny": _gpt2(2, 128, 4),  # GPT-2 shaped, 2 layers of 128: small enough for a 2-core CI
    "gpt2": _gpt2(12, 768, 12),  # the article's model (124M)
    "gpt2-medium": _gpt2(24, 1024, 16),
    "gpt2-large": _gpt2(36, 1280, 20),
    "gpt2-xl": _gpt2(48, 1600, 25),
    # Llama-style (RoPE, RMSNorm, SwiGLU, grouped-query attention), tiny for tests: LlamaConfig's ids, untied
    "llama-tiny": Preset(
        "llama",
        layers=2,
        hidden=128,
        heads=4,
        kv_heads=2,
        intermediate=352,
        vocab=32000,
        positions=2048,
        tied=False,
        bos_id=1,
        eos_ids=(2,),
    ),
    # trained on the standard library's sources (tokengen/contract/trained.py): a model that predicts, and its draft
    "tiny-trained": _bytes(4, 128, 4, 384),
    "tiny-trained-draft": _bytes(2, 64, 2, 384),
    # shaped like Llama-3.2-1B (1.2B parameters)
    "llama-1b": Preset(
        "llama",
        layers=16,
        hidden=2048,
        heads=32,
        kv_heads=8,
        intermediate=8192,
        vocab=128256,
        positions=131072,
        tied=True,
        bos_id=128000,
        eos_ids=(128001,),
        rope_theta=500000.0,
    ),
}
"""The model presets by name (their transformers configs: tokengen.models.MODELS)."""

PRESET_FACTS: dict[str, ModelFacts] = {
    name: ModelFacts(positions=p.positions, eos_ids=p.eos_ids, vocab_size=p.vocab) for name, p in PRESETS.items()
}
"""What the planner asks of each preset, read from PRESETS."""


def is_local_path(model: str) -> bool:
    return model not in PRESET_FACTS and (os.sep in model or model.startswith(".") or Path(model).exists())


def checkpoint_dir(model: str) -> Path:
    """A local checkpoint's directory, once it is one: SpecError naming the fix for a name that is
    neither a preset nor a path, or a directory without config.json."""
    if not is_local_path(model):
        raise SpecError(
            f"unknown model {model!r}: use one of {', '.join(PRESET_FACTS)} or a local directory of a causal LM"
        )
    path = Path(model)
    if not (path / "config.json").is_file():
        raise SpecError(f"model path {model!r} has no config.json: give a directory saved with save_pretrained()")
    problem = config_problem(path / "config.json")
    if problem:
        raise SpecError(f"model path {model!r} {problem}")
    return path


RESAVE = "save the model again with save_pretrained()"
WHOLE = ("a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool))
FIELD_SHAPES = {
    "architectures": ("a list of class names", lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v)),
    "model_type": ("a name", lambda v: isinstance(v, str)),
    "n_positions": WHOLE,
    "max_position_embeddings": WHOLE,
    "vocab_size": WHOLE,
    "bos_token_id": ("a token id or a list of them", lambda v: WHOLE[1](v) or _ids(v)),
    "eos_token_id": ("a token id or a list of them", lambda v: WHOLE[1](v) or _ids(v)),
    "text_config": ("a mapping of settings", lambda v: isinstance(v, dict)),
}
"""The fields read before any weight (here, and by transformers' config classes), each with the JSON shape it must
have: a damaged one is one line here, not a traceback from whichever reader meets it first. null is left alone."""


def _ids(value) -> bool:
    return isinstance(value, list) and all(WHOLE[1](i) for i in value)


def config_problem(config_file: Path) -> str | None:
    """What makes a checkpoint's config.json unusable, as the end of a sentence that names the fix, or None. A JSON
    that is not a mapping, a field of the wrong shape (in the config or its text_config), and `auto_map` at any depth
    (classes of the folder's own, whose Python would run with trust_remote_code: refused before anything is built,
    so no prompt on stdin can let it run) are all refused before transformers or any model code reads it."""
    try:
        config = json.loads(config_file.read_text())
    except OSError as exc:
        return f"has a config.json that cannot be read ({exc.strerror or exc}): make it readable"
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past Python's limit, no config either
        return f"has a config.json that is not JSON ({exc}): {RESAVE}"
    if not isinstance(config, dict):
        return f"has a config.json that is a JSON {type(config).__name__}, not a mapping of settings: {RESAVE}"
    try:
        where = _own_code_at(config)
    except RecursionError:
        return f"has a config.json nested too deeply to be a model's settings: {RESAVE}"
    if where is not None:
        return (
            f"needs its own Python code (auto_map in config.json{where}), which is never run here: save the model "
            "as one of transformers' own architectures (e.g. GPT2LMHeadModel)"
        )
    for prefix, part in (("", config), ("text_config.", config.get("text_config"))):
        for name, (shape, fits) in FIELD_SHAPES.items() if isinstance(part, dict) else ():
            value = part.get(name)
            if value is not None and not fits(value):
                return f"has {prefix}{name}={json.dumps(value)[:60]} in config.json, not {shape}: fix it, or {RESAVE}"
    return None


def _own_code_at(part, where: str = "") -> str | None:
    """Where `auto_map` sits in a config (`""` at its top, `", under text_config"` below), or None: any sub-config
    (text_config, vision_config, a decoder's) can name classes of its own."""
    items = part.items() if isinstance(part, dict) else enumerate(part) if isinstance(part, list) else ()
    for key, value in items:
        if key == "auto_map":
            return where and f", under {where}"
        found = _own_code_at(value, f"{where}.{key}".lstrip("."))
        if found is not None:
            return found
    return None


def model_facts(model: str) -> ModelFacts:
    """A preset's facts, or a local checkpoint's from its config.json once its weights are there and
    whole (tokengen.models.load_config asks this too); SpecError naming the fix."""
    if model in PRESET_FACTS:
        return PRESET_FACTS[model]
    path = checkpoint_dir(model)
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
