"""Which code generates: this project's decode loop, or transformers' own generate() as a peer.

Both are built once per trial and called once per run with the same interface (`wrap_step`,
`ranges`) and return the same Generation, so the benchmark, the record and the token checksum
treat a peer exactly like one of our variants.
"""

from __future__ import annotations

from typing import Callable

import torch
from transformers import CompileConfig, LogitsProcessor

from tokengen.generate import Generation, Generator
from tokengen.profiling import NO_RANGES, NoRanges
from tokengen.reference import hf_generate
from tokengen.spec import TrialSpec


class StepMarks(LogitsProcessor):
    """Lets a step timer see generate()'s steps: mark 0 before the call, mark i + 1 when step i's
    logits arrive, so the first interval is the prefill (time to first token) and the others
    are decode steps. It returns the scores untouched."""

    def __init__(self, wrap_step: Callable):
        self.mark = wrap_step(lambda i: None)
        self.steps = 0

    def start(self) -> None:
        self.mark(0)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        self.mark(self.steps)
        return scores


class GenerateEngine:
    """transformers' `model.generate()` on the trial's prompts, greedy, with the trial's cache and
    stop rule (tokengen.reference). compile=default is generate()'s own compilation of the decode
    step (a CompileConfig, allowed on every device so the CPU compiles too)."""

    def __init__(self, model: torch.nn.Module, spec: TrialSpec):
        self.model, self.spec = model, spec
        self.compile_config = None
        if spec.compile != "off":
            mode = "reduce-overhead" if spec.compile == "reduce-overhead" else "default"
            self.compile_config = CompileConfig(mode=mode)
            self.compile_config._compile_all_devices = True  # generate() otherwise compiles on CUDA only

    @torch.inference_mode()
    def __call__(self, wrap_step: Callable | None = None, ranges: NoRanges = NO_RANGES) -> Generation:
        marks = StepMarks(wrap_step) if wrap_step else None
        if marks:
            marks.start()
        tokens = hf_generate(self.model, self.spec, logits_processors=[marks] if marks else [],
                             compile_config=self.compile_config)  # (B, P + steps)
        prompt_len = self.spec.prompt_len
        return Generation(tokens=tokens, steps=tokens.shape[1] - prompt_len, prompt_len=prompt_len)


ENGINES: dict[str, Callable[[torch.nn.Module, TrialSpec], Callable[..., Generation]]] = {
    "loop": Generator,
    "generate": GenerateEngine,
}
