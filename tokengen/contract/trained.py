"""The trained presets: small byte-level GPT-2s trained on this machine's own Python standard library, so that
fidelity, endings and acceptance are measured on a model that predicts, with nothing fetched from a hub.

Torch-free: the planner prices a trained preset by its declared shape (tokengen/contract/model_facts.py) before it
exists, and the driver, the fingerprint and the trial find its checkpoint by what is computed here. A checkpoint
is kept in the cache folder (tokengen/contract/machine/user_folders.py) under a key of the corpus's content, the
recipe, the preset's shape and the torch and transformers versions: a changed corpus or torch builds a new one, the
same ones find the same. A folder named by $TOKENGEN_TRAINED_DIR holds checkpoints carried from another machine (the GPU bundle):
used as they are, whatever this machine's corpus or torch, so two machines measure the same weights on the same
held-out prompts. Each checkpoint ends with a manifest of its files' hashes, written last: one cut short or
changed since is rebuilt, never loaded. The build itself is tokengen/train/ (`python -m tokengen.train`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tokengen.contract.machine.user_folders import cache_folder
from tokengen.contract.model_facts import PRESETS, is_local_path
from tokengen.contract.weight_files import safetensors_metadata, weights_problem

CARRIED_VARIABLE = "TOKENGEN_TRAINED_DIR"  # checkpoints carried from another machine: <dir>/<preset name>/
WEIGHTS, CONFIG, HELDOUT, MANIFEST = "model.safetensors", "config.json", "heldout.npy", "trained.json"
"""A trained checkpoint's files: the weights (their header's metadata: held-out loss, corpus, steps), transformers'
config, the held-out text its prompts are drawn from (tokengen/decode/prompts.py), and the manifest, written last."""
LEFT_OUT = ("site-packages", "test", "tests", "__pycache__")  # third-party code, and the stdlib's own tests


@dataclass(frozen=True)
class Recipe:
    """How a trained preset is built: a budget in steps, not seconds, so two machines whose arithmetic agrees build
    the same model; the shape is the preset's (tokengen/contract/model_facts.py)."""

    steps: int  # optimizer steps
    batch: int  # windows of the preset's whole context (its positions) per step
    short_share: float  # the first steps' share that reads short windows instead, each at a random position
    short_context: int  # bytes per short window
    short_batch: int  # short windows per step
    lr: float  # AdamW's peak learning rate, after a linear warmup, then a cosine down to lr x final_lr
    warmup: int
    final_lr: float
    weight_decay: float  # on the matrices only
    seed: int  # the weights' initialization and the windows' draw
    threads: int = 2  # torch threads: a fixed count, as the arithmetic's order depends on it
    heldout_every: int = 20  # one file in 20 is held out, by a hash of its path relative to the corpus's root
    version: int = 3  # the build's code (documents, loop, files): a change that alters the bytes bumps it


RECIPES: dict[str, Recipe] = {
    "tiny-trained": Recipe(
        steps=2600,
        batch=4,
        short_share=0.75,
        short_context=128,
        short_batch=12,
        lr=3e-3,
        warmup=60,
        final_lr=0.1,
        weight_decay=0.1,
        seed=0,
    ),
    "tiny-trained-draft": Recipe(
        steps=1200,
        batch=4,
        short_share=0.75,
        short_context=128,
        short_batch=12,
        lr=5e-3,
        warmup=40,
        final_lr=0.1,
        weight_decay=0.1,
        seed=0,
    ),
}
"""Each trained preset's recipe (its shape, ids and positions: PRESETS)."""
COMPANIONS = {"tiny-trained": ("tiny-trained-draft",)}
"""What is built beside a trained preset: the draft model of speculative decoding (same bytes, same vocabulary)."""


def draft_of(model) -> str | None:
    """The draft model that proposes for `model` in speculative decoding (its companion), or None."""
    companions = COMPANIONS.get(model) if isinstance(model, str) else None
    return companions[0] if companions else None


def trained(model) -> bool:
    return isinstance(model, str) and model in RECIPES


def corpus_root() -> Path:
    """The standard library's folder of this Python: text every machine that runs the project has."""
    return Path(sysconfig.get_paths()["stdlib"])


def _walk(root: str) -> list[tuple[str, str]]:
    """(relative path, path) strings of every .py file under `root`, less LEFT_OUT's folders, sorted by the first:
    strings, not Paths, so a trial's look-up walks the stdlib's 800 files in a few tens of milliseconds."""
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [s for s in subfolders if s not in LEFT_OUT]
        relative = os.path.relpath(folder, root).replace(os.sep, "/")
        prefix = "" if relative == "." else f"{relative}/"
        found += [(prefix + name, os.path.join(folder, name)) for name in files if name.endswith(".py")]
    return sorted(found)


def corpus_files(root: Path) -> list[tuple[str, Path]]:
    """(path relative to `root`, path) of every .py file under it, less LEFT_OUT's folders, sorted by the first."""
    return [(relative, Path(path)) for relative, path in _walk(str(root))]


def corpus_digest(root: Path) -> str:
    """sha256 (16 hex) of the corpus's file names and contents, computed again only when a file's size or time
    changed (a grid asks once per trial)."""
    stamps = []
    for relative, path in _walk(str(root)):
        status = os.stat(path)
        stamps.append((relative, status.st_size, status.st_mtime_ns))
    return _digest(tuple(stamps), str(root))


@functools.lru_cache(maxsize=8)
def _digest(stamps: tuple, root: str) -> str:
    digest = hashlib.sha256()
    for name, _, _ in stamps:
        digest.update(name.encode() + b"\0" + (Path(root) / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def versions() -> dict[str, str | None]:
    """torch's and transformers' versions: the arithmetic and the model's code (its initialization) a build uses."""
    found = {}
    for package in ("torch", "transformers"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def settings(name: str, recipe: Recipe | None = None) -> dict:
    """What the checkpoint is built from, less the corpus: the preset's shape and the recipe."""
    return {"preset": dataclasses.asdict(PRESETS[name]), "recipe": dataclasses.asdict(recipe or RECIPES[name])}


def build_key(name: str, recipe: Recipe | None = None, corpus: Path | None = None) -> str:
    """16 hex digits of the corpus's content, the preset's shape, the recipe and the torch and transformers versions."""
    facts = {**settings(name, recipe), "corpus": corpus_digest(corpus or corpus_root()), **versions()}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def cached_path(name: str, recipe: Recipe | None = None, corpus: Path | None = None, root: Path | None = None) -> Path:
    """Where this machine keeps the preset built from `recipe` on `corpus`: `<cache folder>/trained/<name>-<key>`."""
    return (root or cache_folder() / "trained") / f"{name}-{build_key(name, recipe, corpus)}"


def carried_path(name: str) -> Path | None:
    folder = os.environ.get(CARRIED_VARIABLE)
    return Path(folder).expanduser() / name if folder else None


def find(name: str) -> Path | None:
    """The preset's checkpoint, whole: a carried one first ($TOKENGEN_TRAINED_DIR), else this machine's built one;
    None where neither is there and whole (the build makes it: tokengen.train.ensure)."""
    carried = carried_path(name)
    if carried is not None and carried.exists() and damage(carried) is None:
        return carried
    path = cached_path(name)
    return path if damage(path) is None else None


def damage(path: Path) -> str | None:
    """Why a checkpoint folder is not a whole trained checkpoint (no manifest: never finished; a file missing, or
    not the bytes its manifest names: cut short or changed), or None."""
    try:
        listed = json.loads((path / MANIFEST).read_text())["files"]
        stamps = tuple((name, (path / name).stat().st_size, (path / name).stat().st_mtime_ns) for name in listed)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"{path} has no readable {MANIFEST}: it was never finished"
    return _judged(str(path), stamps, tuple(sorted(listed.items())))


@functools.lru_cache(maxsize=16)
def _judged(path: str, stamps: tuple, listed: tuple) -> str | None:
    for name, sha in listed:
        if hashlib.sha256((Path(path) / name).read_bytes()).hexdigest() != sha:
            return f"{Path(path) / name} is not the file its manifest names (cut short or changed)"
    return weights_problem(Path(path))


def file_hashes(path: Path) -> dict[str, str]:
    """The manifest's list: every file of the folder but the manifest, by name, with its sha256."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.iterdir())
        if p.is_file() and p.name != MANIFEST
    }


def checkpoint_facts(path: Path) -> dict:
    """What a trained checkpoint says of itself (its weights' metadata), as record fields: its held-out loss in
    nats per byte, the corpus it learned (content hash) and its steps; {} for a checkpoint that says none."""
    meta = safetensors_metadata(path / WEIGHTS) if (path / WEIGHTS).is_file() else {}
    if "heldout_loss" not in meta:
        return {}
    return {
        "model_heldout_loss": float(meta["heldout_loss"]),
        "model_corpus": meta.get("corpus"),
        "model_train_steps": int(meta.get("steps", 0)) or None,
    }


def record_facts(model: str) -> dict:
    """The record's model fields for a trial's model: a trained preset's checkpoint, or a local checkpoint that
    carries a trained one's metadata (a carried folder named by its path); {} otherwise."""
    if trained(model):
        path = find(model)
        return checkpoint_facts(path) if path is not None else {}
    return checkpoint_facts(Path(model)) if is_local_path(model) else {}


def model_label(model: str, heldout_loss=None) -> str:
    """A model as the terminal table and the report name it: trained weights with their held-out loss
    (`tiny-trained (trained: held-out loss 1.884 nats/byte)`), anything else by its name."""
    if heldout_loss is None or heldout_loss != heldout_loss:  # None, or NaN (a column without the figure)
        return str(model)
    return f"{model} (trained: held-out loss {float(heldout_loss):.3f} nats/byte)"
