"""transformers' own generate(), set up to be comparable with a trial: the peer we must match and beat.

`hf_generate(model, spec)` runs greedy `model.generate()` on the trial's prompts (tokengen.prompts)
and ends rows as the trial's `stop` says, so it returns (B, P + steps) tokens that equal ours
whenever ours are right: same prompts, same end of every row, same padding (eos[0]) after it.
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import (
    CompileConfig,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)

from tokengen.models import eos_ids
from tokengen.prompts import prompt_ids
from tokengen.spec import SpecError, TrialSpec
from tokengen.stopping import parse_stop, target_lengths

HF_CACHE = {"dynamic": "dynamic", "static": "static"}  # cache=none: use_cache=False (full recompute)


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
) -> torch.Tensor:
    """(B, P + steps) tokens from greedy model.generate() on the trial's prompts, prompt included:
    rows end at their own EOS (stop=model, any of a list of EOS ids), never (stop=never), or at
    their seeded length (a distribution); ended rows are padded with eos[0]. cache=none recomputes
    everything (use_cache=False), dynamic and static use generate()'s caches of the same names.

    `logits_processors` run after ours (a step timer can watch through one); `compile_config` is
    generate()'s own compilation of its decode step."""
    if not comparable(spec):
        raise SpecError(f"sampling={spec.sampling} has no generate() peer: use sampling=greedy")
    config = model.config
    device = next(model.parameters()).device
    prompts = prompt_ids(config, spec.batch_size, spec.prompt_len, spec.seed, device)  # (B, P)
    eos = eos_ids(config)
    rules = _stop_rules(spec, eos, device)
    cache = {"use_cache": False} if spec.cache == "none" else {"cache_implementation": HF_CACHE[spec.cache]}
    generation = GenerationConfig(
        do_sample=False,
        max_new_tokens=spec.max_seqlen,
        eos_token_id=rules.pop("eos_token_id"),
        pad_token_id=eos[0] if eos else 0,
        compile_config=compile_config,
        **cache,
    )
    processors = LogitsProcessorList([*rules.pop("logits_processor", []), *logits_processors])
    attention_mask = torch.ones_like(prompts)
    return model.generate(
        prompts, attention_mask=attention_mask, generation_config=generation, logits_processor=processors, **rules
    )
