"""transformers' own generate(), set up to be comparable with a trial: the peer we must match and beat.

`hf_generate(model, spec)` runs greedy `model.generate()` on the trial's prompts (tokengen.decode.prompts)
and ends rows as the trial's `stop` says, so it returns (B, P + steps) tokens that equal ours
whenever ours are right: same prompts, same end of every row, same padding (eos[0]) after it.
`GenerateEngine` runs it behind the engines' interface (engine=generate, variants hf_generate*).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from transformers import (
    CompileConfig,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)

from tokengen.contract.declarations import RECOMPUTE, declared, load
from tokengen.contract.forms import parse_stop
from tokengen.contract.spec import SpecError, TrialSpec
from tokengen.decode.advance import generate_arguments
from tokengen.decode.loop import Generation
from tokengen.decode.prompts import prompt_ids
from tokengen.decode.ranges import NO_RANGES, NoRanges
from tokengen.decode.stopping import target_lengths
from tokengen.models import eos_ids


def comparable(spec: TrialSpec) -> bool:
    """generate() samples with torch.multinomial, not our seeded race: only greedy compares."""
    return spec.sampling == "greedy"


class ForceEosAtTarget(LogitsProcessor):
    """A row whose drawn length is reached says EOS, and keeps saying it (our padding): the step
    that picks generated token n (0-based) forces EOS where target <= n + 1, as StopPolicy does."""

    def __init__(self, targets: torch.Tensor, prompt_len: int, eos: int):
        self.targets, self.prompt_len, self.eos = targets, prompt_len, eos  # targets (B,)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids.shape[1] - self.prompt_len
        due = (self.targets <= generated + 1)[:, None]  # (B, 1)
        forced = torch.full_like(scores, float("-inf"))
        forced[:, self.eos] = 0.0
        return torch.where(due, forced, scores)  # (B, V)


class EndAtTarget(StoppingCriteria):
    """Per row: done once it holds its drawn number of generated tokens; the batch ends with its
    longest row, as ours does."""

    def __init__(self, targets: torch.Tensor, prompt_len: int):
        self.targets, self.prompt_len = targets, prompt_len

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        return self.targets <= input_ids.shape[1] - self.prompt_len  # (B,) bool


def _stop_rules(spec: TrialSpec, eos: list[int], device) -> dict:
    """generate() arguments that end rows as `spec.stop` says. `eos_token_id=[]` means no EOS
    stopping (None would fall back to the model's own EOS)."""
    kind, _ = parse_stop(spec.stop)
    if kind == "model":
        return {"eos_token_id": eos}
    if kind == "never":
        return {"eos_token_id": []}
    targets = target_lengths(spec.stop, spec.batch_size, spec.max_seqlen, spec.seed).to(device)  # (B,)
    return {
        "eos_token_id": [],
        "logits_processor": LogitsProcessorList([ForceEosAtTarget(targets, spec.prompt_len, eos[0])]),
        "stopping_criteria": StoppingCriteriaList([EndAtTarget(targets, spec.prompt_len)]),
    }


@torch.inference_mode()
def hf_generate(
    model,
    spec: TrialSpec,
    logits_processors: Sequence[LogitsProcessor] = (),
    compile_config: CompileConfig | None = None,
    speculation: tuple[dict, dict] = ({}, {}),
) -> torch.Tensor:
    """(B, P + steps) tokens from greedy model.generate() on the trial's prompts, prompt included:
    rows end at their own EOS (stop=model, any of a list of EOS ids), never (stop=never), or at
    their seeded length (a distribution); ended rows are padded with eos[0]. cache=none recomputes
    everything (use_cache=False), dynamic and static use generate()'s caches of the same names.

    `logits_processors` run after ours (a step timer can watch through one); `compile_config` is
    generate()'s own compilation of its decode step; `speculation` its own speculative decoding (GenerationConfig
    fields, call arguments: tokengen.decode.advance.generate_arguments)."""
    if not comparable(spec):
        raise SpecError(f"sampling={spec.sampling} has no generate() peer: use sampling=greedy")
    config = model.config
    device = next(model.parameters()).device
    prompts = prompt_ids(config, spec.batch_size, spec.prompt_len, spec.seed, device, spec.max_seqlen)  # (B, P)
    eos = eos_ids(config)
    rules = _stop_rules(spec, eos, device)
    recompute = declared("cache", spec.cache).family == RECOMPUTE
    cache = (
        {"use_cache": False} if recompute else {"cache_implementation": spec.cache}
    )  # dynamic | static, generate()'s names too
    generation = GenerationConfig(
        do_sample=False,
        max_new_tokens=spec.max_seqlen,
        eos_token_id=rules.pop("eos_token_id"),
        pad_token_id=eos[0] if eos else 0,
        compile_config=compile_config,
        **cache,
        **speculation[0],
    )
    processors = LogitsProcessorList([*rules.pop("logits_processor", []), *logits_processors])
    attention_mask = torch.ones_like(prompts)
    return model.generate(
        prompts,
        attention_mask=attention_mask,
        generation_config=generation,
        logits_processor=processors,
        **rules,
        **speculation[1],
    )


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


class StepRanges(LogitsProcessor):
    """Puts the trial's per-step profiler ranges around generate()'s steps, so a profile of the peer
    reads as ours does: "step 0" from the call to the first logits (the prefill), then "step i"
    from logits i - 1 to logits i (decode forward i). A range opened at one call closes at the next."""

    def __init__(self, ranges: NoRanges):
        self.ranges, self.steps, self.opened = ranges, 0, None

    def start(self) -> None:
        self._open(0)

    def close(self) -> None:
        if self.opened is not None:
            self.opened.__exit__(None, None, None)
            self.opened = None

    def _open(self, i: int) -> None:
        self.opened = self.ranges.step(i)
        self.opened.__enter__()

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.close()
        self.steps += 1
        self._open(self.steps)
        return scores


class GenerateEngine:
    """transformers' `model.generate()` on the trial's prompts, greedy, with the trial's cache and
    stop rule (tokengen.engines.hf_generate). compile=default is generate()'s own compilation of the decode
    step (a CompileConfig with the mode's torch.compile keywords, allowed on every device so the CPU
    compiles too). A trial's advancing value (speculate) is run as generate()'s own speculation at the same k: prompt
    lookup, or its assisted generation with the same draft model; there its logits processors run once per verified
    position (and prompt lookup's on stand-in logits before a forward), so the step timer's marks are not forwards."""

    def __init__(self, model: torch.nn.Module, spec: TrialSpec):
        self.model, self.spec = model, spec
        self.compile_config = None
        options = load("compile", spec.compile)
        if options is not None:
            self.compile_config = CompileConfig(**options)
            self.compile_config._compile_all_devices = True  # generate() otherwise compiles on CUDA only
        self.speculation = generate_arguments(model, spec)

    @torch.inference_mode()
    def __call__(self, wrap_step: Callable | None = None, ranges: NoRanges = NO_RANGES) -> Generation:
        watchers = [
            w
            for w in (
                StepMarks(wrap_step) if wrap_step else None,
                StepRanges(ranges) if ranges is not NO_RANGES else None,
            )
            if w
        ]
        for watcher in watchers:
            watcher.start()
        try:
            tokens = hf_generate(
                self.model,
                self.spec,
                logits_processors=watchers,
                compile_config=self.compile_config,
                speculation=self.speculation,
            )  # (B, P + steps)
        finally:
            for watcher in watchers:
                getattr(watcher, "close", lambda: None)()
        prompt_len = self.spec.prompt_len
        return Generation(tokens=tokens, steps=tokens.shape[1] - prompt_len, prompt_len=prompt_len)
