"""One decode loop, composed from the trial's orthogonal knobs.

The cache decides what a step feeds the model, the sampler picks the token, the stop policy pads
and marks ended sequences, the advance decides how a step moves the rows on (tokengen/decode/advance.py:
one token per row per forward, unless a declared value names another), and the stop check decides when
the host finds out. Everything a step does is enqueued on the device; only the stop check ever waits for it.

Step 0 is the prefill: one forward over the whole prompt (B, P) and the first sampled token, so
the latency of step 0 is the time to first token. Every later step feeds the newest token (cache
variants) or the whole sequence so far (no cache) and samples one more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from tokengen.contract.declarations import declared, load
from tokengen.contract.spec import TrialSpec
from tokengen.decode.advance import AdvanceCounts, advance_for
from tokengen.decode.prompts import prompt_ids
from tokengen.decode.ranges import NO_RANGES, NoRanges
from tokengen.decode.rows import BatchRows
from tokengen.decode.sampling import make_sampler
from tokengen.decode.stopping import StopPolicy
from tokengen.models import eos_ids


@dataclass
class Generation:
    tokens: torch.Tensor  # (B, P + columns): the prompt (BOS column first), then the generated tokens
    steps: int  # decode steps (advances) whose tokens count (step 0 = prefill + first token)
    prompt_len: int = 1  # P: tokens[:, P:] are the generated ones
    produced: int | None = None  # tokens generated, padding included; None: B x steps, one per row per step
    counts: AdvanceCounts | None = None  # what the advances did (None: an engine with no advance of ours)

    def __post_init__(self) -> None:
        if self.produced is None:
            self.produced = self.tokens.shape[0] * self.steps


def compile_model(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    """The model as the compile mode's declaration says to compile it (torch.compile's keywords), or as it is."""
    options = load("compile", mode)
    return model if options is None else torch.compile(model, **options)


class Generator:
    """Built once per trial (compiling and allocating what lasts), called once per run.

    The prefill runs on the eager model and only decode steps on the compiled one: the prefill's
    shape (B, P) is not decode's (B, 1), it runs once per generation, and compiling it would add
    a second graph (under CUDA graphs, a second recorded graph and its memory) for one call per
    run. So the compiled decode sees one shape per step for the whole trial and nothing is
    recompiled from one run to the next. transformers' generate() makes the same choice.
    """

    def __init__(self, model: torch.nn.Module, spec: TrialSpec):
        self.spec = spec
        self.config = model.config
        self.device = next(model.parameters()).device
        self.eager = model
        self.model = compile_model(model, spec.compile)
        self.cache = load("cache", spec.cache)(model, spec.batch_size, spec.prompt_len, spec.max_seqlen)
        self.graphed = declared("compile", spec.compile).cuda_graphs
        self.stop_check = load("stop_check", spec.stop_check)
        self.policy = StopPolicy.build(
            spec.stop, eos_ids(self.config), spec.batch_size, spec.max_seqlen, spec.seed, self.device
        )
        self.prompts = prompt_ids(
            self.config, spec.batch_size, spec.prompt_len, spec.seed, self.device, spec.max_seqlen
        )  # (B, P)
        self.advance = advance_for(spec)

    def step_logits(self, tokens: torch.Tensor, i: int) -> torch.Tensor:
        """Decode step i's logits (B, V): the prefill at step 0, one decode forward after."""
        prompt_len = self.spec.prompt_len
        if i == 0:
            return self.cache.prefill(self.eager, tokens[:, :prompt_len])
        if self.graphed:
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs are dead
        return self.cache.decode(self.model, tokens, prompt_len + i)

    @torch.inference_mode()
    def __call__(self, wrap_step: Callable | None = None, ranges: NoRanges = NO_RANGES) -> Generation:
        """One generation from the trial's prompts; `wrap_step` lets a timer or profiler see each step."""
        spec, prompt_len = self.spec, self.spec.prompt_len
        tokens = torch.empty((spec.batch_size, prompt_len + spec.max_seqlen), dtype=torch.long, device=self.device)
        tokens[:, :prompt_len] = self.prompts
        finished = torch.zeros(spec.batch_size, dtype=torch.bool, device=self.device)
        sample = make_sampler(spec.sampling, spec.seed, self.device)
        self.cache.reset()
        rows = BatchRows(
            tokens, finished, sample, self.policy, self.step_logits, self.cache, self.model, prompt_len, ranges
        )
        self.advance.start(rows)

        def all_finished() -> torch.Tensor:
            return torch.all(rows.finished)

        step = wrap_step(self.advance) if wrap_step else self.advance
        steps = self.stop_check(step, all_finished, spec.max_seqlen, ranges)
        never_asks = declared("stop_check", spec.stop_check).overrun is None  # runs max_seqlen columns, padded
        columns = spec.max_seqlen if never_asks else self.advance.columns(steps)
        return Generation(
            tokens=rows.tokens[:, : prompt_len + columns],
            steps=steps,
            prompt_len=prompt_len,
            produced=rows.rows * columns,
            counts=self.advance.counts(),
        )
