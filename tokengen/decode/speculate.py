"""Greedy speculative decoding as a way to advance (tokengen/decode/advance.py): k tokens proposed per row, verified in
one forward of k + 1 positions, the longest prefix the model agrees with kept, and the model's own token after it.

Advance 0 is the prefill and its token, as the one-token loop makes them. Each later advance asks the proposer
(tokengen/decode/proposers.py: the row's own text, or a draft model) for k tokens, runs the row's last token and
the k proposals through the decode model (compiled where the trial compiles: its one verify shape is (R, k + 1))
on the lane's KV cache, and takes the greedy target of each position. Proposal j is accepted while it equals target
j - 1, all before it accepted too: the a accepted proposals and target a (the model's own token after them, what a
one-token step would make there) are appended as one run (the stop rule applied token by token: tokengen/decode/
rows.py), so the tokens are the one-token loop's wherever the verify's logits rank as a one-token step's do. The
cache then holds the k + 1 positions the verify wrote, of which the last k - a were rejected: they are rolled back
(`crop`: a DynamicCache drops its last columns; a StaticCache moves its device counter back, and the next forward
overwrites the stale columns, which the mask already hides). Where the rows cannot take k + 1 more tokens
(max_seqlen, the static cache's columns and the model's positions end there), or the proposer has nothing to offer,
the advance makes one token with the trial's one-token decode step instead.

Greedy only, one batch, a cache that keeps keys and values (declared: tokengen/contract/declarations.py). Rows
accept the batch's common prefix, so the tokens are exact at any batch size; the declaration runs one row, where
acceptance is the row's own. The host reads how many tokens were accepted after each verify (a sync, as
transformers' assisted generation makes): the dynamic cache's crop needs it, and the proposer proposes from it.

`Speculate` is what a value's `impl` names: called with the spec, it makes the advance; `generate_arguments` gives
transformers' generate() its own speculation at the same k (prompt_lookup_num_tokens, or assistant_model), the
value's peer (the generate() engine).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from tokengen.contract.declarations import declared
from tokengen.contract.model_facts import model_facts
from tokengen.contract.spec import SpecError, TrialSpec
from tokengen.contract.trained import COMPANIONS, draft_of
from tokengen.decode.advance import AdvanceCounts
from tokengen.decode.caches import cache_kwarg
from tokengen.decode.proposers import NGRAMS, DraftModel, PromptLookup

LOOKUP, DRAFT = "lookup", "draft"


class ProposerClock:
    """Seconds spent proposing in one generation: the host's clock on the CPU; on CUDA a pair of events around each
    proposal, read once the generation has ended, so timing never waits for the device."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"
        self.reset()

    def reset(self) -> None:
        self.seconds, self.events, self.started = 0.0, [], None

    def __enter__(self):
        if self.cuda:
            self.started = torch.cuda.Event(enable_timing=True)
            self.started.record()
        else:
            self.started = time.perf_counter()

    def __exit__(self, *exc) -> None:
        if self.cuda:
            ended = torch.cuda.Event(enable_timing=True)
            ended.record()
            self.events.append((self.started, ended))
        else:
            self.seconds += time.perf_counter() - self.started

    def total(self) -> float:
        if self.events:
            self.events[-1][1].synchronize()  # done already where the stop check waited for the last step
        return self.seconds + sum(start.elapsed_time(end) for start, end in self.events) / 1e3


class Speculative:
    """The advance: built once per trial with its proposer, started once per generation, called once per step."""

    def __init__(self, spec: TrialSpec, proposer, k: int):
        self.proposer, self.k, self.limit = proposer, k, spec.max_seqlen
        self.graphed = declared("compile", spec.compile).cuda_graphs
        self.clock = ProposerClock(spec.device)
        self.lane = None

    def start(self, lane) -> None:
        self.lane, self.kwarg = lane, cache_kwarg(lane.model)
        self.proposer.start(lane)
        self.length, self.done = 0, False  # generated tokens of the rows still going; every row ended
        self.forwards = self.verifies = self.proposed = self.accepted = 0
        self.clock.reset()

    def __call__(self, i: int) -> None:
        if self.done:  # a stop check that runs on past the end: nothing left to forward
            return
        lane = self.lane
        if self.length == 0:  # the prefill and its token
            self._append(lane.sample(lane.forward(0))[:, None], 1)
            return
        proposed = None
        if self.length + self.k + 1 <= self.limit:
            with self.clock:
                proposed = self.proposer.propose(self.length)  # (R, k) or None
        if proposed is None:
            self._mark()
            logits = lane.cache.decode(lane.model, lane.tokens, lane.prompt_len + self.length)  # (R, V)
            self._append(lane.sample(logits)[:, None], 1)
            return
        self._verify(proposed)

    def _verify(self, proposed: torch.Tensor) -> None:
        lane, k = self.lane, self.k
        end = lane.prompt_len + self.length
        fed = torch.cat([lane.tokens[:, end - 1 : end], proposed], dim=1)  # (R, k + 1): the last token, k proposed
        self._mark()
        logits = lane.model(fed, use_cache=True, **{self.kwarg: lane.cache.cache}).logits  # (R, k + 1, V)
        targets = lane.sample(logits.reshape(-1, logits.shape[-1])).view(fed.shape)  # (R, k + 1)
        agreed = (proposed == targets[:, :k]).long().cumprod(dim=1).sum(dim=1)  # (R,) leading proposals accepted
        accepted = int(torch.where(lane.finished, k, agreed).min())  # the going rows' common prefix (host: a sync)
        if accepted < k:
            lane.cache.cache.crop(accepted - k)  # the rejected positions, rolled back
        self.verifies, self.proposed, self.accepted = self.verifies + 1, self.proposed + k, self.accepted + accepted
        self._append(targets[:, : accepted + 1], accepted + 1)
        self.proposer.kept(self.length)

    def _append(self, run: torch.Tensor, n: int) -> None:
        """The run (R, n) after each row's tokens, as the stop rule leaves it; one forward made it."""
        lane = self.lane
        lane.append(run, torch.full((run.shape[0],), n, dtype=torch.long, device=run.device))
        self.forwards += 1
        self.length += n
        self.done = bool(lane.finished.all())

    def _mark(self) -> None:
        if self.graphed:
            torch.compiler.cudagraph_mark_step_begin()  # the last forward's graph outputs are dead

    def columns(self, steps: int) -> int:
        return int(self.lane.lengths.max()) if self.lane.lengths is not None else steps

    def counts(self) -> AdvanceCounts:
        return AdvanceCounts(
            forwards=self.forwards,
            proposed=self.proposed,
            accepted=self.accepted,
            verifies=self.verifies,
            proposer_s=self.clock.total(),
        )


def build_draft(spec: TrialSpec) -> torch.nn.Module:
    """The trial's draft model: its model's draft companion (tokengen/contract/trained.py), on the trial's device and
    dtype, built once where this machine has none."""
    from tokengen.models import build_model

    name = draft_of(spec.model)
    if name is None:
        with_one = " or model=".join(COMPANIONS)
        raise SpecError(f"model {spec.model} has no draft model: use model={with_one}")
    return build_model(name, spec.dtype, spec.device, spec.seed)


@dataclass(frozen=True)
class Speculate:
    """A `speculate` value: who proposes (LOOKUP or DRAFT) and how many tokens (k) per verify."""

    proposer: str
    k: int

    def __call__(self, spec: TrialSpec) -> Speculative:
        if self.proposer == LOOKUP:
            return Speculative(spec, PromptLookup(spec, self.k), self.k)
        return Speculative(spec, DraftModel(spec, self.k, build_draft(spec)), self.k)

    def generate_arguments(self, model: torch.nn.Module, spec: TrialSpec) -> tuple[dict, dict]:
        """transformers' own speculation at this k, for generate(): (its GenerationConfig's fields, its call's
        arguments). Its prompt lookup matches n-grams of up to 3, as ours; its draft proposes k tokens every time
        (a constant schedule, no confidence cut), as ours."""
        if self.proposer == LOOKUP:
            positions = model_facts(spec.model).positions
            if spec.prompt_len + spec.max_seqlen + self.k - 1 > positions:  # its verify runs up to k past the end
                most = positions + 1 - spec.prompt_len - self.k
                raise SpecError(
                    f"generate()'s prompt lookup feeds up to k={self.k} positions past max_seqlen, beyond model "
                    f"{spec.model}'s {positions}: use max_seqlen <= {most}"
                )
            return {"prompt_lookup_num_tokens": self.k, "max_matching_ngram_size": max(NGRAMS)}, {}
        draft = build_draft(spec)
        settings = draft.generation_config
        settings.num_assistant_tokens, settings.num_assistant_tokens_schedule = self.k, "constant"
        settings.assistant_confidence_threshold = 0.0
        return {}, {"assistant_model": draft}


LOOKUP2, LOOKUP4, LOOKUP8 = (Speculate(LOOKUP, k) for k in (2, 4, 8))
DRAFT2, DRAFT4, DRAFT8 = (Speculate(DRAFT, k) for k in (2, 4, 8))
