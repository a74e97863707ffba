"""The token checksum every result carries: one int64 array layout, one hash."""

from __future__ import annotations

import hashlib

import torch


def tokens_array(tokens: torch.Tensor):
    """The tokens as docs/design.md fixes them: a C-ordered int64 (B, L) host array, BOS column included."""
    return tokens.to(torch.int64).cpu().contiguous().numpy()


def tokens_sha256(tokens: torch.Tensor) -> str:
    """docs/design.md's checksum: sha256 of tokens_array's bytes."""
    return hashlib.sha256(tokens_array(tokens).tobytes()).hexdigest()
