"""The rule each declared fact of a value makes, for whichever knob the value belongs to: one function per fact.

A value declares what it needs of the rest of the trial (tokengen/contract/declarations.py: `greedy_only`,
`requires`, `advancing_requires`, `compiles_fixed_only`, `max_batch`, `needs_cache`, `needs_draft`, `requests_only`,
`not_with_requests`); each function here reads one of those facts off any value and answers with the reason the
trial cannot run, in one line that names the fix, or None. tokengen/contract/rules.py asks them all, in `FACT_RULES`'
order, of every value of a trial, so a new value's facts are enforced with no line written here.
"""

from __future__ import annotations

from typing import Callable

from tokengen.contract.declarations import CACHED, Declared, declared, knob, plain, trial_values, values
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trained import COMPANIONS, draft_of
from tokengen.contract.variants import label_for


def _this(value: Declared) -> str:
    return f"{value.knob}={value.name}"


def greedy_only(spec: TrialSpec, value: Declared) -> str | None:
    if value.greedy_only and spec.sampling != "greedy":
        return f"{_this(value)} is greedy only (got sampling={spec.sampling}): use sampling=greedy"
    return None


def requirements(spec: TrialSpec, value: Declared) -> str | None:
    """Other knobs' values it needs: one is named as the fix, several by the variant that holds them all."""
    wrong = [(knob, name) for knob, name in value.requires if str(getattr(spec, knob)) != name]
    if not wrong:
        return None
    got = ", ".join(f"{knob}={getattr(spec, knob)}" for knob, _ in wrong)
    several = len(value.requires) > 1
    if several:
        fix = "variant " + label_for({value.knob: value.name, **dict(value.requires)})  # the value's own preset
    else:
        fix = ", ".join(f"{knob}={name}" for knob, name in wrong)
    if value.owns:
        return f"{_this(value)} has its own {value.owns}" + (f" ({got})" if several else "") + f": use {fix}"
    needed = ", ".join(f"{knob}={name}" for knob, name in value.requires)
    return f"{_this(value)} needs {needed} (got {got}): use {fix}"


def advancing_requirements(spec: TrialSpec, value: Declared) -> str | None:
    """An engine that runs an advancing knob's value its own way only with other knobs' values (generate()'s own
    speculation runs eager, on a dynamic cache): refused where the trial advances otherwise than one token a step."""
    if not value.advancing_requires:
        return None
    advancing = [d for d in trial_values(spec.knobs) if knob(d.knob).advances and d.impl is not None]
    wrong = [(k, name) for k, name in value.advancing_requires if str(getattr(spec, k)) != name]
    if not advancing or not wrong:
        return None
    needed = ", ".join(f"{k}={name}" for k, name in value.advancing_requires)
    got = ", ".join(f"{k}={getattr(spec, k)}" for k, _ in wrong)
    fix = ", ".join(f"{k}={name}" for k, name in wrong)
    return f"{_this(value)} runs {_this(advancing[0])} only with {needed} (got {got}): use {fix}"


def draft_for(spec: TrialSpec) -> str | None:
    """The draft model the trial proposes with (a value that declares `needs_draft`), or None: its files are part
    of what the trial's result depends on (tokengen/contract/machine/fingerprint.py)."""
    needing = any(value.needs_draft for value in trial_values(spec.knobs))
    return draft_of(spec.model) if needing else None


def needs_draft(spec: TrialSpec, value: Declared) -> str | None:
    if not value.needs_draft or draft_of(spec.model) is not None:
        return None
    with_one = " or model=".join(COMPANIONS)
    return f"{_this(value)} proposes with the model's draft companion, and model {spec.model} has none: use model={with_one}"


def compiles_fixed_only(spec: TrialSpec, value: Declared) -> str | None:
    cache, off = declared("cache", spec.cache), plain("compile").name
    if not value.compiles_fixed_only or spec.compile == off or cache.fixed_shapes:
        return None
    fixed = " or cache=".join(c.name for c in values("cache") if c.fixed_shapes)
    return (
        f"{_this(value)} compiles only with cache={fixed} (cache={spec.cache} stays eager): "
        f"use cache={fixed} or compile={off}"
    )


def max_batch(spec: TrialSpec, value: Declared) -> str | None:
    most = value.max_batch
    if most is None or spec.batch_size <= most:
        return None
    rows = "one row" if most == 1 else f"{most} rows"
    return f"{_this(value)} generates {rows} at most (got batch_size={spec.batch_size}): use batch_size={most}"


def needs_cache(spec: TrialSpec, value: Declared) -> str | None:
    if not value.needs_cache or declared("cache", spec.cache).family == CACHED:
        return None
    kept = " or cache=".join(c.name for c in values("cache") if c.family == CACHED)
    return f"{_this(value)} needs a cache that keeps keys and values (got cache={spec.cache}): use cache={kept}"


def requests_only(spec: TrialSpec, value: Declared) -> str | None:
    if not value.requests_only or spec.requests != 0:
        return None
    other = plain(value.knob).name
    instead = f" or use {value.knob}={other}" if other != value.name else ""
    return f"{_this(value)} serves requests: set requests=N (N > 0){instead}"


def not_with_requests(spec: TrialSpec, value: Declared) -> str | None:
    """A value that runs one batch: its fix is its family's value that serves requests, else the knob's plain one."""
    if not value.not_with_requests or spec.requests == 0:
        return None
    serving = [d for d in values(value.knob) if not d.not_with_requests]
    alternative = next((d for d in serving if d.family == value.family), serving[0] if serving else None)
    fix = f"use {value.knob}={alternative.name} for requests, or requests=0" if alternative else "use requests=0"
    return f"{_this(value)} runs one batch: {fix}"


FACT_RULES: tuple[Callable[[TrialSpec, Declared], str | None], ...] = (
    greedy_only,
    requirements,
    advancing_requirements,
    compiles_fixed_only,
    max_batch,
    needs_cache,
    needs_draft,
    requests_only,
    not_with_requests,
)
"""Every declared fact's rule, in the order a trial is judged by them."""
