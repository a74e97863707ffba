"""A trained preset built once and kept: under a lock in the cache folder, into a folder of its own that is renamed
into place whole, its manifest written last (tokengen/contract/trained.py reads it back).

Two drivers or trials that want the same checkpoint build it once: the second waits on the lock and finds the
first's. A folder that is there but not whole (a build killed half-way, a file cut short or changed since) is
removed and built again, never loaded. The files are the format of a user's own checkpoint (config.json and
model.safetensors, read by the same loader), plus the held-out text its prompts come from.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy

from tokengen.contract.machine.user_folders import cache_folder, own_subfolder
from tokengen.contract.trained import (
    CONFIG,
    HELDOUT,
    MANIFEST,
    RECIPES,
    WEIGHTS,
    Recipe,
    build_key,
    cached_path,
    corpus_digest,
    corpus_root,
    damage,
    file_hashes,
)
from tokengen.train import documents
from tokengen.train.fit import fit, training_config, unigram_loss


def say_to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cpu_seconds() -> float:
    """This process's user + system CPU time: the build's budget is CPU time, whatever else shares the cores."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def locked(path: Path, say: Callable[[str], None], what: str):
    """An exclusive lock on `path` (a file beside the checkpoint), said once where another build holds it."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"model {what}: another process is building it; waiting for it ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def obtain(
    name: str,
    recipe: Recipe | None = None,
    corpus: Path | None = None,
    root: Path | None = None,
    say: Callable[[str], None] = say_to_stderr,
    progress: bool = True,
) -> tuple[Path, dict | None]:
    """(the checkpoint's folder, the build's figures, or None where it was already there and whole)."""
    recipe, corpus = recipe or RECIPES[name], corpus or corpus_root()
    if root is None:
        root = own_subfolder(cache_folder(), "trained")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = cached_path(name, recipe, corpus, root)
    with locked(root / f"{path.name}.lock", say, name):
        why = damage(path)
        if why is None:
            return path, None
        if os.path.lexists(path):
            say(f"model {name}: {why}: building it again")
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        figures = build(name, recipe, corpus, path, progress)
    return path, figures


def build(name: str, recipe: Recipe, corpus: Path, path: Path, progress: bool = True) -> dict:
    """Split the corpus, train, save into a folder beside `path`, rename it into place; the build's figures."""
    started, cpu_started = time.perf_counter(), cpu_seconds()
    train_docs, heldout_docs = documents.split(corpus, recipe.heldout_every)
    train_ids, heldout_ids = documents.stream(train_docs), documents.stream(heldout_docs)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=recipe.steps, desc=f"training {name}", unit="step", file=sys.stderr, mininterval=1.0)

    def advance(step: int, loss: float) -> None:
        bar.update(1)
        if step % 10 == 0:
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

    model, figures = fit(name, recipe, train_ids, heldout_ids, advance if bar else None)
    if bar:
        bar.close()
    figures.update(
        unigram_loss=unigram_loss(train_ids, heldout_ids),
        corpus=corpus_digest(corpus),
        steps=recipe.steps,
        key=build_key(name, recipe, corpus),
        train_bytes=int(len(train_ids)),
        heldout_bytes=int(len(heldout_ids)),
        documents=len(train_docs) + len(heldout_docs),
    )
    folder = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=path.parent))
    try:
        save(name, model, heldout_ids, figures, folder)
        os.rename(folder, path)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    figures.update(seconds=time.perf_counter() - started, cpu_seconds=cpu_seconds() - cpu_started)
    return figures


def save(name: str, model, heldout_ids: numpy.ndarray, figures: dict, folder: Path) -> None:
    """config.json, model.safetensors (the tied head once; the figures in its header's metadata), heldout.npy,
    then the manifest of their hashes: the same bytes for the same model."""
    from safetensors.torch import save

    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}  # tied to wte
    metadata = {"format": "pt", **{k: repr(v) if isinstance(v, float) else str(v) for k, v in figures.items()}}
    (folder / WEIGHTS).write_bytes(sorted_header(save(state, metadata=metadata)))
    training_config(name).to_json_file(folder / CONFIG)
    numpy.save(folder / HELDOUT, heldout_ids, allow_pickle=False)
    manifest = {"name": name, "key": figures["key"], "files": file_hashes(folder)}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def sorted_header(raw: bytes) -> bytes:
    """A safetensors file with its header's keys sorted: the library writes its metadata in a hash map's order,
    which differs from one process to the next. The tensors' bytes and their offsets stay; the header is padded
    with spaces to 8 bytes, as the format wants."""
    length = int.from_bytes(raw[:8], "little")
    header = json.dumps(json.loads(raw[8 : 8 + length]), sort_keys=True, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header + raw[8 + length :]
