"""One decode loop, composed from the trial's orthogonal knobs.

The cache decides what a step feeds the model, the sampler picks the token, the stop policy pads
and marks ended sequences, and the stop check decides when the host finds out. Everything a step
does is enqueued on the device; only the stop check ever waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from tokengen.caches import CACHES
from tokengen.models import bos_id, eos_ids
from tokengen.profiling import NO_RANGES, NoRanges
from tokengen.sampling import make_sampler
from tokengen.spec import TrialSpec
from tokengen.stop_checks import STOP_CHECKS
from tokengen.stopping import StopPolicy


@dataclass
class Generation:
    tokens: torch.Tensor  # (B, 1 + steps), BOS column first
    steps: int


def compile_model(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    if mode == "off":
        return model
    return torch.compile(model, mode=None if mode == "default" else mode)


class Generator:
    """Built once per trial (compiling and allocating what lasts), called once per run."""

    def __init__(self, model: torch.nn.Module, spec: TrialSpec):
        self.spec = spec
        self.config = model.config
        self.device = next(model.parameters()).device
        self.model = compile_model(model, spec.compile)
        self.cache = CACHES[spec.cache](model, spec.batch_size, spec.max_seqlen)
        self.graphed = spec.compile == "reduce-overhead"
        self.stop_check = STOP_CHECKS[spec.stop_check]
        self.policy = StopPolicy.build(
            spec.stop, eos_ids(self.config), spec.batch_size, spec.max_seqlen, spec.seed, self.device
        )
        self.bos = bos_id(self.config)

    @torch.inference_mode()
    def __call__(self, wrap_step: Callable | None = None, ranges: NoRanges = NO_RANGES) -> Generation:
        """One generation from a batch of BOS prompts; `wrap_step` lets a timer or profiler see each step."""
        spec = self.spec
        tokens = torch.full((spec.batch_size, 1 + spec.max_seqlen), self.bos, dtype=torch.long, device=self.device)
        finished = torch.zeros(spec.batch_size, dtype=torch.bool, device=self.device)
        sample = make_sampler(spec.sampling, spec.seed, self.device)
        self.cache.reset()

        def step(i: int) -> None:
            with ranges.forward():
                if self.graphed:
                    torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs are dead
                logits = self.cache.logits(self.model, tokens, i)  # (B, V)
            new_tokens = self.policy.apply(sample(logits), finished, i)  # (B,)
            tokens[:, i + 1] = new_tokens

        def all_finished() -> torch.Tensor:
            return torch.all(finished)

        steps = self.stop_check(wrap_step(step) if wrap_step else step, all_finished, spec.max_seqlen, ranges)
        return Generation(tokens=tokens[:, : steps + 1], steps=steps)
