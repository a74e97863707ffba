"""The batch loop's rows as an advance moves them on (the Lane of tokengen/decode/advance.py), one per generation.

Tokens live in one preallocated (B, P + max_seqlen) buffer, the prompts first. `keep` writes advance i's token of
every row in column P + i, as the stop policy leaves it (tokengen/decode/stopping.py): one token per row per advance,
so the rows keep one length and the host never reads one. `append` takes a run of a different length for each row
(R, n) with its counts (R,), on the device: each row's tokens go after its own, the stop rule applied token by token
as keep applies it, so a row ends where the same tokens kept one at a time would end it. Once a run is appended the
rows keep their lengths (`lengths`, each row's tokens up to its end), the buffer reads as padding past each one (as
keep pads an ended row), an ended row takes no more, and a row holding max_seqlen tokens has ended: the longest
row's length is the generated columns that count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from tokengen.decode.ranges import NO_RANGES, NoRanges
from tokengen.decode.stopping import StopPolicy


@dataclass
class BatchRows:
    tokens: torch.Tensor  # (B, P + max_seqlen): the prompts, then each row's generated tokens
    finished: torch.Tensor  # (B,) bool: the row has ended (the stop check asks whether all have)
    sample: Callable[[torch.Tensor], torch.Tensor]  # logits (B, V) -> ids (B,)
    policy: StopPolicy
    step_logits: Callable[[torch.Tensor, int], torch.Tensor]  # (tokens, i) -> advance i's logits (B, V)
    cache: object
    model: torch.nn.Module
    prompt_len: int
    ranges: NoRanges = NO_RANGES
    lengths: torch.Tensor | None = None  # (B,) generated tokens per row, kept once `append` is used

    @property
    def rows(self) -> int:
        return self.tokens.shape[0]

    def forward(self, i: int) -> torch.Tensor:
        with self.ranges.forward():
            return self.step_logits(self.tokens, i)  # (B, V)

    def keep(self, new: torch.Tensor, i: int) -> None:
        self.tokens[:, self.prompt_len + i] = self.policy.apply(new, self.finished, i)  # (B,)

    def append(self, new: torch.Tensor, counts: torch.Tensor) -> None:
        """Row r's next counts[r] tokens are new[r, :counts[r]] (R, n), as the stop rule leaves them."""
        rows, limit = self.rows, self.tokens.shape[1] - self.prompt_len  # limit: max_seqlen
        if self.lengths is None:
            self.lengths = torch.zeros(rows, dtype=torch.long, device=self.tokens.device)
            self.tokens[:, self.prompt_len :] = self.policy.eos[0]  # past a row's length: padding
        for j in range(new.shape[1]):
            at = self.lengths  # (R,) each row's next token's index
            takes = (counts > j) & (at < limit) & ~self.finished  # (R,)
            ended = self.finished.clone()
            token = self.policy.apply(new[:, j], ended, at)  # (R,): `ended` as this token leaves it
            self.finished |= takes & ended
            column = (self.prompt_len + at.clamp(max=limit - 1))[:, None]  # (R, 1)
            kept = torch.where(takes, token, self.tokens.gather(1, column)[:, 0])
            self.tokens.scatter_(1, column, kept[:, None])
            self.lengths = at + takes
        self.finished |= self.lengths >= limit
