"""The training loop of a trained preset, and its figures on held-out text.

nanoGPT's recipe at a byte model's scale: transformers' own GPT2LMHeadModel built from the preset's declared
config (no dropout: a few minutes of training do not overfit), AdamW with decay on the matrices only, a linear
warmup then a cosine to `final_lr` of the peak, gradients clipped at 1. Windows are drawn from the training stream
by a seeded generator, in two phases (a sequence-length warmup): first short windows, many per step, each placed
at a random offset of the positions the model embeds, so every position is trained at a fraction of the
attention's cost per byte; then windows of the whole context, so the model learns to read all of it at once. A
fixed number of steps and threads and its own random streams: the same corpus, recipe and torch give the same
bytes, whatever the caller's seed or thread count (both are restored after).
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable

import numpy
import torch

from tokengen.contract.model_facts import PRESETS
from tokengen.contract.trained import Recipe

EVAL_WINDOWS = 96  # held-out windows the figures are read on, evenly spaced over the held-out stream


def training_config(name: str):
    """The preset's transformers config (tokengen.models.preset_config) without dropout, as the checkpoint saves it."""
    from tokengen.models import preset_config

    config = preset_config(PRESETS[name])
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0
    config.architectures = ["GPT2LMHeadModel"]
    return config


def learning_rate(recipe: Recipe, step: int) -> float:
    if step < recipe.warmup:
        return recipe.lr * (step + 1) / recipe.warmup
    done = (step - recipe.warmup) / max(1, recipe.steps - recipe.warmup)
    return recipe.lr * (recipe.final_lr + (1 - recipe.final_lr) * 0.5 * (1 + math.cos(math.pi * done)))


@contextlib.contextmanager
def own_threads(threads: int):
    """torch's intra-op threads set to the recipe's for the build, the caller's put back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fit(
    name: str, recipe: Recipe, train_ids: numpy.ndarray, heldout_ids: numpy.ndarray, progress: Callable | None = None
):
    """(the trained model, in eval mode; its held-out figures). `progress(step, loss)` after every step."""
    from transformers import GPT2LMHeadModel

    context = PRESETS[name].positions
    with torch.random.fork_rng(devices=[]), own_threads(recipe.threads):
        torch.manual_seed(recipe.seed)
        model = GPT2LMHeadModel(training_config(name)).train()
        data = torch.from_numpy(train_ids.astype(numpy.int64))
        draw = torch.Generator().manual_seed(recipe.seed)
        matrices = [p for p in model.parameters() if p.dim() >= 2]
        others = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": matrices, "weight_decay": recipe.weight_decay}, {"params": others, "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=recipe.lr, betas=(0.9, 0.95))
        short_steps = round(recipe.short_share * recipe.steps)
        for step in range(recipe.steps):
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(recipe, step)
            short = step < short_steps
            length, rows = (recipe.short_context, recipe.short_batch) if short else (context, recipe.batch)
            starts = torch.randint(len(data) - length - 1, (rows,), generator=draw)
            windows = torch.stack([data[s : s + length + 1] for s in starts.tolist()])  # (rows, T + 1)
            positions = None
            if short:  # (rows, T): each window at an offset of its own among the model's positions
                positions = torch.randint(context - length + 1, (rows, 1), generator=draw) + torch.arange(length)
            logits = model(windows[:, :-1], position_ids=positions, use_cache=False).logits  # (rows, T, V)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if progress:
                progress(step, float(loss.detach()))
        model.eval()
        return model, heldout_figures(model, heldout_ids, context)


@torch.inference_mode()
def heldout_figures(model, heldout_ids: numpy.ndarray, context: int) -> dict:
    """Mean loss in nats per byte (EOS included) and the median top-1/top-2 logit margin, on EVAL_WINDOWS windows
    of `context` bytes spread evenly over the held-out stream."""
    ids = torch.from_numpy(heldout_ids.astype(numpy.int64))
    count = max(1, min(EVAL_WINDOWS, (len(ids) - 1) // context))
    stride = (len(ids) - 1 - context) // max(1, count - 1) if count > 1 else 0
    losses, margins = [], []
    for start in range(0, count, 16):
        windows = torch.stack(
            [ids[i * stride : i * stride + context + 1] for i in range(start, min(count, start + 16))]
        )
        logits = model(windows[:, :-1], use_cache=False).logits.float()  # (b, T, V)
        losses.append(
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten(), reduction="none")
        )
        top2 = logits.topk(2, dim=-1).values  # (b, T, 2)
        margins.append((top2[..., 0] - top2[..., 1]).flatten())
    return {"heldout_loss": float(torch.cat(losses).mean()), "heldout_margin": float(torch.cat(margins).median())}


def unigram_loss(train_ids: numpy.ndarray, heldout_ids: numpy.ndarray) -> float:
    """The held-out loss (nats per id) of the training stream's id frequencies, add-one smoothed: what a model that
    learned nothing but byte counts reaches."""
    counts = numpy.bincount(train_ids.astype(numpy.int64), minlength=257) + 1.0
    logp = numpy.log(counts / counts.sum())
    return float(-logp[heldout_ids.astype(numpy.int64)].mean())
