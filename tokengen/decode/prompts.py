"""The trial's prompts: BOS, then prompt_len - 1 seeded token ids, a different prompt on every row; for a
checkpoint that carries held-out text (a trained preset's), prompt_len ids of that text instead.

A random-weight model decodes degenerately from one BOS (every row the same), so a check on rows
needs rows that start apart. The ids come from their own CPU generator, seeded from the trial's
seed and a fixed label: drawing them never moves the global RNG that builds the weights, so the
weights do not depend on prompt_len, and the same spec gives the same prompts on every machine
and every variant (transformers' generate() included, see tokengen.engines.hf_generate). prompt_len = 1 is
the article's setting: BOS alone.

A model that predicts is asked what it was trained for: each row reads prompt_len bytes of a held-out document
from a seeded offset of its own, and every second row's prompt ends within max_seqlen bytes of its document's end,
so under stop=model rows end at the model's own end-of-document id, at steps of their own. The text travels in the
checkpoint's folder (tokengen/contract/trained.py: HELDOUT), so two machines whose standard libraries differ
prompt the same weights alike.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy
import torch
from transformers import PretrainedConfig

from tokengen.contract.trained import HELDOUT
from tokengen.models import bos_id, eos_ids


def stream_seed(seed: int, label: str) -> int:
    """A seed for one named random stream of the trial, so prompts and target lengths (both from
    `seed`) are not the same draws read two ways."""
    digest = hashlib.sha256(f"{seed}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def prompt_ids(
    config: PretrainedConfig, batch_size: int, prompt_len: int, seed: int, device="cpu", max_seqlen: int | None = None
) -> torch.Tensor:
    """(B, P) prompts: column 0 is BOS; column 1 is drawn without replacement, so rows differ; the
    rest are uniform over the vocabulary. Drawn on the CPU, then moved to `device`. A checkpoint
    with held-out text gives text instead (`text_prompts`; P > 1).

    Beyond V rows (the vocabulary), column 1 is a new permutation per block of V rows and column 2
    tells apart the rows that share a column-1 id (block j adds j to the first block's id there), so
    rows still differ; rows up to V are drawn exactly as before. Where they cannot differ (P = 2, or
    more than V * V rows) tokengen.contract.rules refuses the trial at plan time.

    Only BOS and the vocabulary size shape the draw, so a checkpoint that differs in its EOS ids
    gets the same prompts. An EOS id inside a prompt ends nothing: only generated tokens are
    checked for EOS, here and in generate()."""
    bos = torch.full((batch_size, 1), bos_id(config), dtype=torch.long)  # (B, 1)
    if prompt_len == 1:
        return bos.to(device)
    gen = torch.Generator().manual_seed(stream_seed(seed, "prompts"))
    text = heldout_text(getattr(config, "name_or_path", "") or "")
    if text is not None:
        return text_prompts(text, eos_ids(config)[0], batch_size, prompt_len, max_seqlen, gen).to(device)
    vocab = config.get_text_config(decoder=True).vocab_size
    first = torch.randperm(vocab, generator=gen)[:batch_size]  # (B,) distinct while B <= V
    rest = torch.randint(vocab, (batch_size, prompt_len - 2), generator=gen)  # (B, P-2)
    if batch_size > vocab:
        first, rest = _beyond_vocabulary(first, rest, vocab, gen)
    drawn = torch.cat([first[:, None], rest], dim=1)  # (B, P-1)
    return torch.cat([bos, drawn], dim=1).to(device)


def _beyond_vocabulary(first: torch.Tensor, rest: torch.Tensor, vocab: int, gen: torch.Generator):
    """Column 1 and the rest for B > V rows: block j (rows jV .. jV+V-1) draws its own permutation for
    column 1 and sets column 2 to the first block's value there, for the same column-1 id, plus j (mod V):
    two rows with one column-1 id lie in two blocks, so their column 2 differs."""
    rows = rest.shape[0]
    if rest.shape[1] == 0 or rows > vocab * vocab:
        raise ValueError(f"{rows} distinct prompts need prompt_len >= 3 and at most {vocab}^2 rows")
    blocks = -(-rows // vocab)
    first = torch.cat([first] + [torch.randperm(vocab, generator=gen) for _ in range(blocks - 1)])[:rows]  # (B,)
    row_of = torch.empty(vocab, dtype=torch.long)
    row_of[first[:vocab]] = torch.arange(vocab)  # column-1 id -> its row in the first block
    block = torch.arange(rows) // vocab  # (B,)
    rest = rest.clone()
    rest[:, 0] = torch.where(block > 0, (rest[row_of[first], 0] + block) % vocab, rest[:, 0])
    return first, rest


def heldout_text(folder: str) -> numpy.ndarray | None:
    """The held-out ids a checkpoint's folder carries (EOS, a document, EOS, ...), or None."""
    path = Path(folder) / HELDOUT if folder else None
    if path is None or not path.is_file():
        return None
    stat = path.stat()
    return _loaded(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _loaded(path: str, size: int, mtime_ns: int) -> numpy.ndarray:
    return numpy.load(path, allow_pickle=False)


def text_prompts(
    text: numpy.ndarray, eos: int, rows: int, prompt_len: int, max_seqlen: int | None, gen: torch.Generator
) -> torch.Tensor:
    """(rows, P) windows of the held-out ids, each ending at an offset of its own: even rows anywhere in the text,
    odd rows within max_seqlen ids before a document's end (its EOS), so a model that follows the text ends them.
    A window may start in the document before its own, as training windows do."""
    ends = numpy.flatnonzero(text == eos)  # (documents + 1,) each document's EOS, and the BOS before the first
    ends = ends[ends >= prompt_len]
    chosen: list[int] = []
    for row in range(rows):
        while True:
            if row % 2 and max_seqlen and len(ends):
                end = int(ends[int(torch.randint(len(ends), (1,), generator=gen))])
                end -= int(torch.randint(min(max_seqlen, end - prompt_len + 1), (1,), generator=gen))
            else:
                end = int(torch.randint(prompt_len, len(text) + 1, (1,), generator=gen))
            if end not in chosen or len(chosen) >= len(text) - prompt_len:
                break
        chosen.append(end)
    windows = numpy.stack([text[end - prompt_len : end] for end in chosen]).astype(numpy.int64)  # (rows, P)
    return torch.from_numpy(windows)
