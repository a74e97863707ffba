"""Grid expansion: a composed config in, the list of trials to run out. Pure: no Ray, no MLflow.

A grid is axes (lists of values for any trial field), optional `blocks` (sub-grids whose products
are joined; top-level axes apply to, and override, every block) and `exclude` rules (a point is
dropped when it matches every field of a rule; a rule's value may be a list). `variant: all` means
every preset, and `all` on a field with choices (a knob: every declared value) every choice. Every knob
is an axis of every grid, unset (null) until a grid file or the command line sets it, so
`grid.stop_check=[every_k]` needs no `+`. Each point starts from `trial`, takes its variant's knobs,
then its own axes; a trial knob that a point's variant sets again, or a trial setting on the command line that a
point overrides, is refused, never silently dropped.
Combinations that cannot run are dropped with their reason; anything else wrong is a config error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
from collections import Counter
from dataclasses import dataclass, field, replace

from sweeps.planning.config import SweepConfig
from sweeps.planning.peak_search import SearchSettings, search_points, slowest_path
from sweeps.planning.settings import check_settings
from tokengen.contract.rules import incompatibility, problem, resolve
from tokengen.contract.spec import CHOICES, KNOBS, SpecError, TrialSpec, parse_field
from tokengen.contract.variants import CUSTOM, VARIANTS, knobs_for

TRIAL_FIELDS = {f.name for f in dataclasses.fields(TrialSpec)}
GRID_KEYS = {"blocks", "exclude"}
ALL = "all"


def has_axes(grid: dict | None) -> bool:
    """Whether a grid sets anything (the schema's unset knob axes alone are no grid)."""
    return any(value is not None for value in (grid or {}).values())


def every_value(name: str) -> list:
    """What `all` stands for on an axis: every preset, or every choice (a knob's declared values)."""
    return list(VARIANTS) if name == "variant" else list(CHOICES[name])


@dataclass(frozen=True)
class PlannedTrial:
    """A spec plus, in GPU-type studies, the accelerator type it is pinned to; `attempt` counts its
    measurements (2.. when sweeps/execution/remeasure.py runs a noisy or contended trial again; not in the key);
    `search` and `probe`: a peak search's id and the probe's number (sweeps/planning/peak_search.py; not in the key)."""

    spec: TrialSpec
    accelerator_type: str | None = None
    attempt: int = 1
    search: str | None = None
    probe: int | None = None

    @property
    def key(self) -> str:
        if self.accelerator_type is None:
            return self.spec.key()
        return hashlib.sha256(f"{self.spec.key()}@{self.accelerator_type}".encode()).hexdigest()[:16]


@dataclass
class GridPlan:
    trials: list[PlannedTrial]
    dropped: Counter = field(default_factory=Counter)  # reason -> number of points
    duplicates: int = 0
    later: list[PlannedTrial] = field(default_factory=list)  # a peak search's further probes, at most: priced, not run

    def describe(self) -> list[str]:
        lines = [f"dropped {n} point(s): {reason}" for reason, n in self.dropped.items()]
        if self.duplicates:
            lines.append(f"dropped {self.duplicates} duplicate point(s) (same trial key)")
        return lines


def _as_list(value) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _axes(raw: dict, where: str) -> dict[str, list]:
    axes = {}
    for name, values in raw.items():
        if name in GRID_KEYS or values is None:  # None: an axis the grid leaves unset
            continue
        if name not in TRIAL_FIELDS:
            raise SpecError(f"{where} axis {name!r} is not a trial field: use one of {', '.join(sorted(TRIAL_FIELDS))}")
        if values == ALL and name not in CHOICES and name != "variant":
            raise SpecError(
                f"{where} axis {name!r} has no fixed set of values for `all`: list them, e.g. {where}.{name}=[...]"
            )
        values = every_value(name) if values == ALL else _as_list(values)
        if not values:
            raise SpecError(f"{where} axis {name!r} has no values: give it at least one, e.g. {where}.{name}=[...]")
        for value in values:
            try:
                parse_field(name, value)
            except SpecError as exc:
                raise SpecError(f"{where} axis {name!r}: {exc}: fix the value") from None
        axes[name] = values
    return axes


def _mappings(grid: dict, key: str, what: str, example: str) -> list[dict]:
    """grid.blocks or grid.exclude: a list of mappings, else one line naming the shape (`+grid.exclude=5`)."""
    value = grid.get(key) or []
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, dict) for item in value):
        raise SpecError(
            f"grid.{key}={value!r} is not a list of {what}: write it as grid.{key}='{example}' (quoted in a shell)"
        )
    return list(value)


def _block_axes(grid: dict) -> list[dict[str, list]]:
    """Each block's axes, the top-level ones applied to (and overriding) every block."""
    top = _axes(grid, "grid")
    blocks = _mappings(grid, "blocks", "sub-grids (each a mapping of axes to values)", "[{batch_size: [1,2]}]") or [{}]
    return [{**_axes(dict(block), f"grid.blocks[{index}]"), **top} for index, block in enumerate(blocks)]


def count_points(grid: dict | None) -> int:
    """How many points the grid expands to, before exclusions: the product of each block's axis lengths."""
    return sum(math.prod(len(values) for values in axes.values()) for axes in _block_axes(dict(grid or {})))


def _points(grid: dict):
    for axes in _block_axes(grid):
        names = list(axes)
        for values in itertools.product(*(axes[n] for n in names)):
            yield dict(zip(names, values))


def _spec_for(trial: dict, point: dict) -> TrialSpec:
    """trial's values, then the variant's knobs, then the point's own axes."""
    variant = point.get("variant", trial.get("variant"))
    knobs = {} if variant == CUSTOM else knobs_for(str(variant))
    if knobs is None:
        raise SpecError(
            f"unknown variant {variant!r}: use one of {', '.join(VARIANTS)}, a name they combine to "
            "(static_compiled_int8), all, or custom"
        )
    fields = {**trial, **knobs, **point}
    fields.pop("variant", None)
    return resolve(None, **fields)


def _parsed(name: str, value):
    """A value as the spec holds it (`auto` is runs=0), or as given where it is wrong (expand names that)."""
    try:
        return parse_field(name, value)
    except SpecError:
        return value


def overridden_setting(trial: dict, grid: dict | None, given: list[str] | None = None) -> str | None:
    """One line for a trial setting that some point never runs with, because the point overrides it. Dropped
    silently, a quantization set in `trial` beside `grid.variant=[...]` would never be measured; a value every point
    keeps is no conflict. `given`: the trial fields set on the command line (sweeps/planning/entry_errors.py), each
    judged against the axes of its own field and, for a knob, the points' variants (a preset sets every knob; `custom`
    none). None, the planner's call, which cannot tell a grid file's trial values from the command line's: every knob
    away from its default, against the variants only, since an axis narrowing a grid file's value
    (`+grid=smoke +grid.model=[gpt2]`) is what axes are for, but a knob a preset sets again is never used."""
    if not has_axes(grid):
        return None  # no grid: the planner names that first
    defaults = TrialSpec()
    if given is None:
        names = [k for k in KNOBS if k in trial and _parsed(k, trial[k]) != getattr(defaults, k)]
    else:
        names = [name for name in dict.fromkeys(given) if name in TRIAL_FIELDS and name in trial]
    for axes in _block_axes(dict(grid)) if names else ():
        for name in names:
            value, wanted = trial[name], _parsed(name, trial[name])
            if given is not None and name in axes and any(_parsed(name, v) != wanted for v in axes[name]):
                listed = ",".join(str(v) for v in axes[name])
                return (
                    f"trial.{name}={value} is overridden by the grid axis grid.{name}=[{listed}]: put the value on "
                    f"the axis (grid.{name}=[{value}]) or drop trial.{name}"
                )
            if name not in KNOBS or name in axes:
                continue
            from_axis = "variant" in axes
            for variant in axes["variant"] if from_axis else [trial.get("variant")]:
                knobs = {} if variant == CUSTOM else knobs_for(str(variant)) or {}
                if name in knobs and knobs[name] != wanted:
                    who = f"the grid's variant {variant}" if from_axis else f"trial.variant={variant}"
                    who += " (the default)" if not from_axis and variant == defaults.variant else ""
                    return (
                        f"trial.{name}={value} is dropped: {who} sets every knob, {name}={knobs[name]} among them: "
                        f"make it an axis, grid.{name}=[{value}] (an axis applies after the variant)"
                    )
    return None


def _excluded(point: dict, spec: TrialSpec, rules: list[dict]) -> dict | None:
    for rule in rules:
        if all(getattr(spec, k, point.get(k)) in _as_list(v) for k, v in rule.items()):
            return rule
    return None


def expand(trial: dict, grid: dict | None, accelerator_types: list[str] | None = None) -> GridPlan:
    """All runnable trials of the grid, de-duplicated by key; SpecError for a config error."""
    grid = dict(grid or {})
    rules = [
        dict(r)
        for r in _mappings(
            grid, "exclude", "rules (each a mapping of trial fields to values)", "[{cache: none, batch_size: 1}]"
        )
    ]
    for rule in rules:
        unknown = set(rule) - TRIAL_FIELDS
        if unknown:
            raise SpecError(f"grid.exclude rule {rule} names {', '.join(sorted(unknown))}, which are not trial fields")
    plan, seen = GridPlan(trials=[]), set()
    for point in _points(grid):
        try:
            spec = _spec_for(trial, point)
        except SpecError as exc:
            raise SpecError(f"grid point {point}: {exc}") from None
        rule = _excluded(point, spec, rules)
        reason = f"excluded by rule {rule}" if rule else incompatibility(spec)
        if reason:
            plan.dropped[reason] += 1
            continue
        wrong = problem(spec)
        if wrong:
            raise SpecError(f"grid point {point}: {wrong}")
        types = accelerator_types if spec.device == "cuda" and accelerator_types else [None]
        for accelerator in types:
            planned = PlannedTrial(spec, accelerator)
            if planned.key in seen:
                plan.duplicates += 1
                continue
            seen.add(planned.key)
            plan.trials.append(planned)
    if not plan.trials:
        why = "; ".join(plan.describe()) or "no points"
        raise SpecError(f"the grid expands to no runnable trial ({why}): widen its axes or drop an exclude rule")
    return plan


def plan_sweep(config: SweepConfig) -> GridPlan:
    """The sweep's trials from its composed config: settings checked, the grid's size bounded, then expanded.
    SpecError in one line for a bad setting, a missing grid, one over sweep.max_trials or a trial knob its variants
    set again."""
    check_settings(config.sweep)
    if not has_axes(config.grid):
        raise SpecError("no grid: append one with +grid=NAME (smoke, article, full, scaling, serving, harness)")
    points, limit = count_points(config.grid), int(config.sweep.max_trials)
    if points > limit:
        raise SpecError(
            f"the grid has {points:,} points, more than sweep.max_trials={limit}: narrow its axes, "
            "or raise sweep.max_trials to run them all"
        )
    overridden = overridden_setting(config.trial, config.grid)
    if overridden:
        raise SpecError(overridden)
    plan = expand(config.trial, config.grid, config.sweep.accelerator_types)
    search = SearchSettings.of(config.sweep)
    if search is None:
        return plan
    rates = [rate for axes in _block_axes(dict(config.grid)) for rate in axes.get("request_rate", [])]
    rates += [config.trial["request_rate"]] if config.trial.get("request_rate") else []
    first = search_points(plan.trials, rates, search)
    return replace(plan, trials=first, later=slowest_path(first, search))
