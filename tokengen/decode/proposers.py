"""Who proposes a speculative advance's k tokens (tokengen/decode/speculate.py): the row's own text, or a draft model.

A proposer is started once per generation on the lane (tokengen/decode/rows.py), asked for k tokens per row once
the rows hold `length` generated tokens (`propose(length)`: (R, k) on the lane's device, or None where it has none
to offer, and the advance makes one token instead), and told how long the rows are after each verify (`kept`), so
that what it keeps of its own (a draft model's KV cache) is rolled back past what the verify rejected. The tokens
so far are the lane's: the prompt's P columns, then `length` generated ones.

- `PromptLookup`: the last n tokens (n = 3, 2, 1: the longest that matched) found earlier in the row, the k tokens
  that followed the most recent such match copied (a copy that runs into the row's end goes on copying what it
  copied, as LZ77 does, so a repeating pattern is proposed whole). Input-grounded text (code that repeats its
  names, a document quoting its prompt) is what it is for; on the host, with numpy, over one new column per token.
- `DraftModel`: a smaller model of the same vocabulary proposes greedily, one token per forward, on its own KV
  cache of the trial's kind (compiled, and replayed as CUDA graphs, as the trial's own decode step is).
"""

from __future__ import annotations

import numpy
import torch

from tokengen.contract.declarations import declared, load

NGRAMS = (3, 2, 1)  # the longest match first: a longer context predicts the continuation better


class PromptLookup:
    def __init__(self, spec, k: int):
        self.k = k
        self.lane = None
        self.host = None  # (R, P + max_seqlen) int64: the rows' tokens as far as copied
        self.copied = 0  # columns of `host` filled

    def start(self, lane) -> None:
        self.lane = lane
        self.host = numpy.zeros(tuple(lane.tokens.shape), dtype=numpy.int64)
        self.copied = 0

    def propose(self, length: int) -> torch.Tensor | None:
        """(R, k) proposals for rows of `length` generated tokens, or None where no row's suffix occurs earlier."""
        end = self.lane.prompt_len + length
        self.host[:, self.copied : end] = self.lane.tokens[:, self.copied : end].cpu().numpy()  # the new columns
        self.copied = end
        rows = [lookup(self.host[r, :end], self.k) for r in range(self.host.shape[0])]
        if all(row is None for row in rows):
            return None
        filler = next(row for row in rows if row is not None)  # a row with no match proposes another's: rejected
        proposed = numpy.stack([filler if row is None else row for row in rows])  # (R, k)
        return torch.from_numpy(proposed).to(self.lane.tokens.device)

    def kept(self, length: int) -> None:
        pass  # the verified columns are copied at the next proposal


def lookup(seq: numpy.ndarray, k: int) -> numpy.ndarray | None:
    """The k tokens that followed the most recent earlier occurrence of `seq`'s last n tokens (n from 3 down to 1),
    copied on into the copy itself where they run past the end; None where no suffix occurs earlier."""
    end = len(seq)
    for n in NGRAMS:
        if end <= n:
            continue
        windows = numpy.lib.stride_tricks.sliding_window_view(seq[: end - 1], n)  # (end - n, n): every earlier n-gram
        found = numpy.flatnonzero((windows == seq[end - n :]).all(axis=1))
        if len(found):
            start = int(found[-1]) + n  # the token after the most recent match (< end)
            out = numpy.empty(k, dtype=numpy.int64)
            for j in range(k):
                source = start + j
                out[j] = seq[source] if source < end else out[source - end]
            return out
    return None


class DraftModel:
    """A draft model's greedy proposals, on a KV cache of its own that holds the positions it has read (`fed`)."""

    def __init__(self, spec, k: int, draft: torch.nn.Module):
        from tokengen.decode.loop import compile_model

        self.k, self.spec = k, spec
        self.eager = draft
        self.model = compile_model(draft, spec.compile)
        self.cache = load("cache", spec.cache)(draft, spec.batch_size, spec.prompt_len, spec.max_seqlen)
        self.graphed = declared("compile", spec.compile).cuda_graphs
        self.lane, self.fed = None, 0

    def start(self, lane) -> None:
        self.lane, self.fed = lane, 0
        self.cache.reset()

    def _step(self, token: torch.Tensor) -> torch.Tensor:
        """One position (R, 1) through the draft: its greedy next token (R,)."""
        if self.graphed:
            torch.compiler.cudagraph_mark_step_begin()
        self.fed += 1
        return self.cache.decode(self.model, token, 1).argmax(-1)  # decode reads token[:, 0:1]

    def propose(self, length: int) -> torch.Tensor:
        tokens, prompt_len = self.lane.tokens, self.lane.prompt_len
        end = prompt_len + length
        if self.fed == 0:
            self.cache.prefill(self.eager, tokens[:, :prompt_len])  # eager, as the trial's prefill
            self.fed = prompt_len
        while self.fed < end:  # the tokens it has not read: the last verify's target, and its last proposal
            guess = self._step(tokens[:, self.fed : self.fed + 1])
        proposed = [guess]
        for _ in range(self.k - 1):
            proposed.append(self._step(proposed[-1][:, None]))
        return torch.stack(proposed, dim=1)  # (R, k); the last is proposed, not read

    def kept(self, length: int) -> None:
        """The rows hold `length` tokens: the draft keeps what it read of them (its accepted proposals) and drops
        the rest, positions past its cache's end overwritten by the next read."""
        keep = min(self.fed, self.lane.prompt_len + length - 1)
        if keep < self.fed:
            self.cache.cache.crop(keep - self.fed)  # a negative count: that many positions removed
            self.fed = keep
