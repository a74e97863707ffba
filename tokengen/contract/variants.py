"""Named generator variants, generated from the knobs' declarations (tokengen.contract.declarations).

A preset is a setting of the knobs (tokengen.contract.spec.KNOBS) and nothing else, so a variant's name can always be
recovered from a spec's knobs (`label_for`, which names every other combination the same way) and a grid may give
knobs without naming a variant. Which presets there are is declared (`PRESETS`: families of values picked by their
facts and crossed); their names are the values' declared words joined (`_name`): the cache's (`kv_cache`,
`static_cache`; `static_` + the compile mode's word once compiled), then the stop check's (`_deferred`), then the
allocator's or the batching's; transformers' engines start with their own word (`hf_generate_cudagraph`). So a
declared value joins the presets its facts fit, with no line here.
"""

from __future__ import annotations

import itertools

from tokengen.contract.declarations import AWAY, EVERY, PEER, PRESETS, Declared, Presets, declared, names, plain, values
from tokengen.contract.declarations import trial_values as values_of
from tokengen.contract.spec import KNOBS

PLAIN = {knob: plain(knob).name for knob in KNOBS}


def _picked(knob: str, pick) -> tuple[Declared, ...]:
    """The values of `knob` a preset axis picks: EVERY, AWAY (all but the plain one), or those with the given facts."""
    if pick == EVERY:
        return values(knob)
    if pick == AWAY:
        return values(knob)[1:]
    wanted = {fact: want if isinstance(want, tuple) else (want,) for fact, want in pick.items()}
    return tuple(d for d in values(knob) if all(getattr(d, fact) in want for fact, want in wanted.items()))


def _name(knobs: dict) -> str:
    """A preset's name: its values' words in knob order, a compiled mode's word in its cache's second word's place
    (static_cache, static_compiled). A transformers peer's starts with its engine's word and says no value its engine
    requires, nor a growing cache (generate()'s own): its compiled mode's word, else its cache's first word
    (hf_generate, hf_generate_static, hf_generate_compiled, hf_generate_batch)."""
    engine = declared("engine", knobs["engine"])
    words = {d.knob: d.preset for d in values_of(knobs) if (d.knob, d.name) not in engine.requires}
    cache, mode = words.pop("cache", ""), words.pop("compile", "")
    if engine.family == PEER:
        lead = words.pop("engine")
        stem = mode or (cache.split("_")[0] if cache and declared("cache", knobs["cache"]).fixed_shapes else "")
        return "_".join(filter(None, [lead, stem, *words.values()]))
    stem = f"{cache.split('_')[0]}_{mode}" if mode else cache
    return "_".join(filter(None, [stem, *words.values()]))


def _family(family: Presets):
    """(name, knobs) of each preset of a declared family, a combination whose values' requirements clash left out."""
    axes = [_picked(knob, pick) for knob, pick in family.axes]
    for combination in itertools.product(*axes):
        picked = {d.knob: d.name for d in combination}
        required = dict(pair for d in combination for pair in d.requires)
        if any(picked.get(knob, name) != name for knob, name in required.items()):
            continue
        knobs = {**PLAIN, **required, **picked}
        yield _name(knobs), knobs


VARIANTS: dict[str, dict] = dict(preset for family in PRESETS for preset in _family(family))
"""The presets: the knob settings a grid names (`grid.variant=[...]`) and `all` expands to."""
_BY_KNOBS = {tuple(knobs[k] for k in KNOBS): name for name, knobs in VARIANTS.items()}

CUSTOM = "custom"
"""A grid's word for "no preset: the knobs come from the axes"; never a label."""


def label_for(knobs: dict) -> str:
    """Every combination's name. A preset's own; else the name of the preset left when the later knobs go
    back to their plain values (attention first, then quant, ... up to the cache), followed by the word of
    each value put back: `static_compiled_pipelined_int8`, `kv_cache_compiled`."""
    values_now = [str(knobs.get(k, PLAIN[k])) for k in KNOBS]
    words = []
    for index in range(len(KNOBS) - 1, -1, -1):
        name = _BY_KNOBS.get(tuple(values_now))
        if name is not None:
            return "_".join([name, *words])
        if values_now[index] != PLAIN[KNOBS[index]]:
            words.insert(0, _word(KNOBS[index], values_now[index]))
            values_now[index] = PLAIN[KNOBS[index]]
    return "_".join([_BY_KNOBS[tuple(values_now)], *words])


def _word(knob: str, value: str) -> str:
    try:
        return declared(knob, value).preset or value
    except KeyError:  # a value no longer declared (an older store): its own text
        return value


_NAMED: dict[str, dict] = {}


def knobs_for(name: str) -> dict | None:
    """The knobs a variant name stands for (a preset, or any generated name), None for no such name."""
    if name in VARIANTS:
        return VARIANTS[name]
    if not _NAMED:
        for combination in itertools.product(*(names(k) for k in KNOBS)):
            knobs = dict(zip(KNOBS, combination))
            _NAMED.setdefault(label_for(knobs), knobs)
    return _NAMED.get(name)
