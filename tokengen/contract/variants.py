"""Named generator variants, generated from the knobs' declarations (tokengen.contract.declarations).

A preset is a setting of the knobs (tokengen.contract.spec.KNOBS) and nothing else, so a variant's name can always be
recovered from a spec's knobs (`label_for`, which names every other combination the same way) and a grid may give
knobs without naming a variant. Names are the
declared words joined: the cache (`kv_cache`, `static_cache`; `static_` + the compile mode's word once compiled),
then the stop check's (`_deferred`), then the allocator's or the batching's; transformers' engines start with
their own word (`hf_generate_cudagraph`). So a declared value gets its presets with no line here:

- our loop: the baseline (no cache) once; every other cache with every stop check; the compile modes on caches of
  fixed shapes only (the one shape a compiled decode step keeps); an allocator on a growing cache, eager;
- request workloads: fixed-shape caches, every compile mode, every stop check that ends a request (not `none`),
  refilled slots (`_continuous`);
- generate(): every cache that keeps keys and values, its compiled modes on fixed shapes, its own stop check;
  generate_batch: its paged cache and continuous batching, eager.
"""

from __future__ import annotations

import itertools

from tokengen.contract.declarations import BOUND, CACHED, RECOMPUTE, Declared, declared, names, plain, values
from tokengen.contract.spec import KNOBS

PLAIN = {knob: plain(knob).name for knob in KNOBS}


def _named(*parts: Declared) -> tuple[str, dict]:
    """A preset's name (the parts' words) and its knobs (the plain setting, then each part's value)."""
    knobs = {**PLAIN, **{p.knob: p.name for p in parts}}
    return "_".join(p.preset for p in parts if p.preset), knobs


def _stem(cache: Declared, mode: Declared) -> str:
    """static_cache eager, static_<mode> compiled: a compiled preset's name says its mode in the cache's place."""
    return cache.preset if not mode.preset else f"{cache.preset.split('_')[0]}_{mode.preset}"


def _loop_presets():
    for cache in values("cache"):
        if cache.family == RECOMPUTE:
            yield _named(cache)  # the article's baseline, the reference every variant is checked against
            continue
        for mode in values("compile"):
            if mode.preset and not cache.fixed_shapes:
                continue
            for check in values("stop_check"):
                name = "_".join(filter(None, (_stem(cache, mode), check.preset)))
                yield name, {**PLAIN, "cache": cache.name, "compile": mode.name, "stop_check": check.name}
        if not cache.fixed_shapes:
            for allocator in values("allocator")[1:]:
                yield _named(cache, allocator)


def _request_presets():
    continuous = [b for b in values("batching") if b.preset]
    for cache in (c for c in values("cache") if c.fixed_shapes):
        for mode in values("compile"):
            for check in (c for c in values("stop_check") if c.family != BOUND):
                for batching in continuous:
                    words = (_stem(cache, mode), check.preset, batching.preset)
                    yield (
                        "_".join(filter(None, words)),
                        {
                            **PLAIN,
                            "cache": cache.name,
                            "compile": mode.name,
                            "stop_check": check.name,
                            "batching": batching.name,
                        },
                    )


def _peer_presets():
    for engine in values("engine")[1:]:
        if engine.impl is None:  # serves requests only: its own paged cache, continuous batching
            cache = next(c for c in values("cache") if c.fixed_shapes)
            yield (
                engine.preset,
                {
                    **PLAIN,
                    "engine": engine.name,
                    "cache": cache.name,
                    "batching": next(b.name for b in values("batching") if b.preset),
                },
            )
            continue
        for cache in (c for c in values("cache") if c.family == CACHED):
            for mode in values("compile"):
                if mode.preset and not cache.fixed_shapes:
                    continue
                word = mode.preset or (cache.preset.split("_")[0] if cache.fixed_shapes else "")
                yield (
                    "_".join(filter(None, (engine.preset, word))),
                    {**PLAIN, "engine": engine.name, "cache": cache.name, "compile": mode.name},
                )


VARIANTS: dict[str, dict] = dict([*_loop_presets(), *_request_presets(), *_peer_presets()])
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
