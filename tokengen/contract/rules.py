"""Which trials can run, and why not: every rule about the spec's values and their combinations.

Torch-free and the only place that answers "can this run?" (with the rule of each fact a value declares, for any
knob: tokengen/contract/fact_rules.py): the planner drops a grid's points with `incompatibility`'s reason, refuses a
wrong value with `problem`'s, and the trial process adds what its machine lacks (`check_runnable`). Each reason is
one line that names the fix.
"""

from __future__ import annotations

import dataclasses
import shutil

from tokengen.contract.arrivals import arrival_problem
from tokengen.contract.declarations import BOUND, declared, trial_values
from tokengen.contract.declarations import KNOBS as DECLARED_KNOBS
from tokengen.contract.declarations import PEER as PEER_FAMILY
from tokengen.contract.declarations import values as knob_values
from tokengen.contract.fact_rules import FACT_RULES
from tokengen.contract.forms import parse_sampling, parse_stop, parse_window
from tokengen.contract.model_facts import is_local_path, model_facts
from tokengen.contract.spec import CHOICES, SpecError, TrialSpec, parse_field
from tokengen.contract.variants import CUSTOM, VARIANTS, knobs_for, label_for

CUDA_ONLY: dict[str, tuple[str, ...]] = {
    knob: cuda for knob in DECLARED_KNOBS if (cuda := tuple(d.name for d in knob_values(knob) if d.cuda_only))
}
"""Values that need a CUDA device, from the knobs' declarations (profile=nsys runs anywhere: on the CPU it
captures the whole trial process)."""
PLAIN = TrialSpec()
"""The knobs' plain settings (each knob's first declared value), for the rules that ask for one."""


def resolve(variant: str | None = None, **fields) -> TrialSpec:
    """A spec from a preset name plus explicit fields (explicit wins, typed by parse_field: text from
    Hydra or a grid axis, "auto" runs), labelled by its knobs."""
    unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(TrialSpec)})
    if unknown:
        raise SpecError(
            f"unknown trial field(s) {', '.join(unknown)}: fields are {', '.join(f.name for f in dataclasses.fields(TrialSpec))}"
        )
    values = {}
    if variant is not None and variant != CUSTOM:
        knobs = knobs_for(variant)
        if knobs is None:
            raise SpecError(
                f"unknown variant {variant!r}: use one of {', '.join(VARIANTS)}, or any name they combine to"
            )
        values.update(knobs)
    values.update({k: parse_field(k, v) for k, v in fields.items() if v is not None and k != "variant"})
    spec = TrialSpec(**values)
    return dataclasses.replace(spec, variant=label_for(spec.knobs))


def cuda_only_reason(spec: TrialSpec) -> str | None:
    """Why this spec cannot run without CUDA, or None."""
    for knob, values in CUDA_ONLY.items():
        value = getattr(spec, knob)
        if value in values and spec.device != "cuda":
            return f"{knob}={value} needs a CUDA device (got device={spec.device})"
    return None


def choice_problem(spec: TrialSpec) -> str | None:
    """The first field whose value is not one of its choices (a knob's: its declared values), or None."""
    for name, allowed in CHOICES.items():
        if getattr(spec, name) not in allowed:
            return f"{name}={getattr(spec, name)!r} is not one of {', '.join(allowed)}"
    return None


def incompatibility(spec: TrialSpec) -> str | None:
    """Why these otherwise valid values cannot run together, or None: a grid drops such points (a value
    that is not a choice is no incompatibility: `problem` refuses it)."""
    if choice_problem(spec):
        return None
    reason = cuda_only_reason(spec)
    if reason:
        return reason
    if declared("compile", spec.compile).cuda_graphs and not declared("cache", spec.cache).fixed_shapes:
        return f"compile={spec.compile} needs cache=static: CUDA graphs want fixed shapes"
    return value_incompatibility(spec) or facts_incompatibility(spec) or serving_incompatibility(spec)


def value_incompatibility(spec: TrialSpec) -> str | None:
    """What a value's declared facts rule out on the trial's device and dtype: the dtypes it runs in, a backend that
    takes no mask beside a cache that passes one (on CUDA, where the kernel refuses it)."""
    cache = declared("cache", spec.cache)
    for value in trial_values(spec.knobs):
        if value.dtypes and spec.dtype not in value.dtypes:
            return (
                f"{value.knob}={value.name} runs in {' or '.join(value.dtypes)} only (got dtype={spec.dtype}): "
                f"use dtype={value.dtypes[0]}"
            )
        if value.no_mask and cache.masked and spec.device == "cuda":
            return (
                f"{value.knob}={value.name} takes no explicit attention mask on CUDA and cache={spec.cache} passes "
                f"one: use cache={', cache='.join(c.name for c in knob_values('cache') if not c.masked)}"
            )
    return None


def facts_incompatibility(spec: TrialSpec) -> str | None:
    """What the declared facts of the trial's values rule out among its other fields, whichever knob a value
    belongs to (tokengen/contract/fact_rules.py): each fact over every value before the next fact, so a grid drops a
    point for the same first reason whatever the knob order."""
    values = trial_values(spec.knobs)
    for rule in FACT_RULES:
        for value in values:
            reason = rule(spec, value)
            if reason:
                return reason
    return None


def serving_problem(spec: TrialSpec) -> str | None:
    """What is wrong with the spec's request workload, or among its values' declared facts, in one line naming the
    fix, or None."""
    if not isinstance(spec.requests, int) or spec.requests < 0:
        return f"requests must be an integer >= 0 (got {spec.requests!r}): 0 runs one batch, N > 0 serves N requests"
    return arrival_problem(spec) or choice_problem(spec) or facts_incompatibility(spec) or serving_incompatibility(spec)


def serving_incompatibility(spec: TrialSpec) -> str | None:
    """Why our request server cannot serve the spec's workload with its knobs, or None (a value that serves requests
    only, or never, says so in its declared facts): a grid that crosses variants with workloads drops such points with
    this reason."""
    if spec.requests == 0 or declared("engine", spec.engine).server is None:
        return None
    if spec.sampling != "greedy":
        return (
            f"sampling={spec.sampling} with requests: a request's draws would depend on its slot; use sampling=greedy"
        )
    if declared("engine", spec.engine).family == PEER_FAMILY:
        if spec.request_trace:
            return (
                f"engine={spec.engine} replays no request_trace here (its requests share one prompt length): use "
                "request_rate for drawn arrivals, or our server (engine=loop)"
            )
        return None  # transformers' server: its own cache and loop, as its declared requirements hold
    if not declared("cache", spec.cache).fixed_shapes:
        fixed = " or cache=".join(c.name for c in knob_values("cache") if c.fixed_shapes)
        return f"requests with cache={spec.cache}: slots keep their own positions in per-slot KV buffers; use cache={fixed}"
    if declared("stop_check", spec.stop_check).family == BOUND:
        return f"requests end through the stop check: use stop_check={PLAIN.stop_check} (or a lagged check)"
    return None


def problem(spec: TrialSpec) -> str | None:
    """The first thing wrong with the spec as a spec, or None."""
    reason = choice_problem(spec)
    if reason:
        return reason
    for name in ("batch_size", "max_seqlen", "prompt_len", "min_runs"):
        if not isinstance(getattr(spec, name), int) or getattr(spec, name) < 1:
            return f"{name} must be an integer >= 1 (got {getattr(spec, name)!r})"
    if not isinstance(spec.runs, int) or spec.runs < 0:
        return f"runs must be an integer >= 1, or auto (got {spec.runs!r})"
    if not isinstance(spec.max_runs, int) or spec.max_runs < spec.min_runs:
        return f"max_runs must be an integer >= min_runs={spec.min_runs} (got {spec.max_runs!r})"
    if not isinstance(spec.target_ci, float) or not spec.target_ci > 0:
        return f"target_ci must be a fraction > 0, e.g. 0.02 for a 95% interval within 2% of the mean (got {spec.target_ci!r})"
    if not isinstance(spec.warmup, int) or spec.warmup < 0:
        return f"warmup must be an integer >= 0 (got {spec.warmup!r})"
    reason = serving_problem(spec) or incompatibility(spec)
    if reason:
        return reason
    try:
        parse_stop(spec.stop)
        parse_sampling(spec.sampling)
        parse_window(spec.profile_steps)
        facts = model_facts(spec.model)
    except SpecError as exc:
        return str(exc)
    reason = positions_problem(spec, facts.positions) or prompts_problem(spec, facts.vocab_size)
    if reason:
        return reason
    if spec.stop != "never" and not facts.eos_ids:
        return f"stop={spec.stop} needs an EOS token, and model {spec.model!r} has none: use stop=never"
    return None


def positions_problem(spec: TrialSpec, limit: int) -> str | None:
    """The model sees positions 0 .. P + max_seqlen - 2 (the last token is never fed back), so
    prompt_len + max_seqlen may be one more than its positions, no more."""
    total = spec.prompt_len + spec.max_seqlen
    if total - 1 <= limit:
        return None
    if spec.prompt_len == 1:
        return f"max_seqlen={spec.max_seqlen} is beyond the model's {limit} positions: use max_seqlen <= {limit}"
    return (
        f"prompt_len + max_seqlen = {total} is beyond the model's {limit} positions: "
        f"use prompt_len + max_seqlen <= {limit + 1} (the last token is never fed back)"
    )


def prompts_problem(spec: TrialSpec, vocab: int) -> str | None:
    """Every row (every request) gets its own prompt (tokengen/decode/prompts.py): BOS and one drawn id tell
    at most V rows apart, BOS and two at most V * V."""
    rows = spec.requests or spec.batch_size
    if spec.prompt_len < 2 or not vocab or rows <= vocab or spec.prompt_len >= 3 and rows <= vocab * vocab:
        return None
    what = "batch_size" if not spec.requests else "requests"
    if spec.prompt_len == 2:
        return (
            f"{what}={rows} with prompt_len=2 wants more distinct prompts than model {spec.model!r} has ids "
            f"({vocab}): use prompt_len >= 3, prompt_len=1 (BOS only) or {what} <= {vocab}"
        )
    return f"{what}={rows} wants more distinct prompts than {vocab}^2: use {what} <= {vocab * vocab}"


def tool_problem(spec: TrialSpec) -> str | None:
    """What this machine lacks to run the spec's profiler, or None. A sweep's trial asks nothing of its
    driver's machine: the trial's host falls back to torch.profiler and says why (sweeps/execution/trial_process.py)."""
    if spec.profile == "nsys" and not shutil.which("nsys"):
        return "profile=nsys needs Nsight Systems' nsys on the PATH: install it or use profile=torch"
    return None


def check_runnable(spec: TrialSpec) -> None:
    """Raise SpecError if the spec is wrong or this machine cannot run it. Called where the trial
    runs (torch and transformers imported there): a local checkpoint is also read as transformers
    reads it, which the planner's JSON reading (tokengen.contract.model_facts) cannot fully judge."""
    if is_local_path(spec.model):
        from tokengen.models import load_config

        load_config(spec.model)
    reason = problem(spec) or tool_problem(spec)
    if reason:
        raise SpecError(reason)
    if spec.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SpecError("device=cuda but torch sees no CUDA device: use device=cpu")
        reason = capability_problem(spec, torch.cuda.get_device_capability())
        if reason:
            raise SpecError(reason)


def capability_problem(spec: TrialSpec, capability: tuple[int, int]) -> str | None:
    """A value that needs a newer GPU than this one (its declared min_capability), in one line."""
    for value in trial_values(spec.knobs):
        if value.min_capability and tuple(capability) < value.min_capability:
            need = ".".join(map(str, value.min_capability))
            return (
                f"{value.knob}={value.name} needs a GPU of compute capability {need} or later (this one has "
                f"{'.'.join(map(str, capability))}): drop it on this GPU"
            )
    return None
