"""Advances a test declares on a knob of its own (tokengen/decode/advance.py): what a new way to advance plugs in as.

`TwoAtOnce` makes two tokens per advance, each from a one-token forward, appended as a run (the lane's `append`):
the same forwards and draws as OneToken, so the same tokens in half the steps. `Counted` is OneToken counting its
calls, for the request server, whose slots keep one token each.
"""

from __future__ import annotations

import torch

from tokengen.decode.advance import AdvanceCounts, OneToken


class TwoAtOnce:
    def __init__(self, spec):
        self.limit = spec.max_seqlen
        self.lane, self.made = None, 0

    def start(self, lane) -> None:
        self.lane, self.made = lane, 0

    def __call__(self, i: int) -> None:
        for _ in range(2):
            if self.made == self.limit:  # every row holds max_seqlen tokens: nothing left to forward
                return
            new = self.lane.sample(self.lane.forward(self.made))  # (B,)
            self.lane.append(new[:, None], torch.ones_like(new))
            self.made += 1

    def columns(self, steps: int) -> int:
        return int(self.lane.lengths.max())

    def counts(self) -> AdvanceCounts:
        return AdvanceCounts(forwards=self.made)


class Counted(OneToken):
    calls = 0

    def __call__(self, i: int) -> None:
        Counted.calls += 1
        super().__call__(i)
