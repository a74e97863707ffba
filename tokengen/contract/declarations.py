"""Every value of every knob, declared once: its implementation, its facts, its one-line doc.

A new optimization is its implementation module plus one entry below. The CLI's choices, the rules
(CUDA-only values, CUDA graphs' fixed shapes), the generated presets, the report's stop-check tables,
the pricing priors and the benchmarks all read these entries, so none of them spells a value again
and a value added here reaches all of them. Torch-free: the planner and the report import it without
torch; `load` imports an implementation only where a trial runs.

Families group a knob's values by the peer a report sets them beside: a lagged stop check beside the
reference one (table (d)), every checked loop beside the no-check bound (table (e)).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

REFERENCE, LAGGED, BOUND = "reference", "lagged", "bound"  # stop checks: sync, fewer host waits, no check at all
EAGER, COMPILED = "eager", "compiled"  # compile modes
RECOMPUTE, CACHED = "recompute", "cached"  # caches: the full prefix every step, or keys and values kept
OURS, PEER = "ours", "peer"  # engines: this project's loops, transformers' own


@dataclass(frozen=True)
class Declared:
    knob: str  # the TrialSpec field
    name: str  # the value users type
    impl: str | None  # "module:attribute" of what runs it; None: nothing extra runs (the knob's plain setting)
    doc: str  # one line: what it does and why it may be faster
    family: str  # the group a report compares against its peer (see the module docstring)
    preset: str = ""  # the word it adds to a generated preset's name ("" at the knob's plain setting)
    cuda_only: bool = False  # needs a CUDA device; refused in one line elsewhere
    cuda_graphs: bool = False  # compile modes: replays decode as CUDA graphs, so the cache must keep fixed shapes
    overrun: int | None = 0  # stop checks: steps it may enqueue past sync's end; None: always runs max_seqlen steps
    fixed_shapes: bool = False  # caches: tensors allocated once at fixed addresses (CUDA graphs, compiled presets)
    compile_cost: float = 0.0  # compile modes: compile time against compile=default (the pricing prior's guess)
    server: str | None = None  # engines: "module:attribute" of what serves request workloads (requests > 0)


_D = Declared
DECLARED: tuple[Declared, ...] = (
    _D("cache", "none", "tokengen.decode.caches:NoCache", family=RECOMPUTE, preset="baseline",
       doc="the article's baseline: recompute the whole prefix every step, O(N^2) in total"),
    _D("cache", "dynamic", "tokengen.decode.caches:DynamicKV", family=CACHED, preset="kv_cache",
       doc="transformers' DynamicCache: keys and values grow by one column per step"),
    _D("cache", "static", "tokengen.decode.caches:StaticKV", family=CACHED, preset="static_cache", fixed_shapes=True,
       doc="transformers' StaticCache, allocated once per trial at P + max_seqlen columns"),
    _D("compile", "off", None, family=EAGER, doc="eager PyTorch"),
    _D("compile", "default", "tokengen.decode.compile_modes:DEFAULT", family=COMPILED, preset="compiled",
       compile_cost=1.0, doc="torch.compile's inductor over the decode step: fused kernels, fewer launches"),
    _D("compile", "reduce-overhead", "tokengen.decode.compile_modes:REDUCE_OVERHEAD", family=COMPILED,
       preset="cudagraph", cuda_only=True, cuda_graphs=True, compile_cost=1.3,
       doc="torch.compile with CUDA graphs: a decode step replays as one launch"),
    _D("compile", "max-autotune", "tokengen.decode.compile_modes:MAX_AUTOTUNE", family=COMPILED, preset="autotuned",
       cuda_only=True, cuda_graphs=True, compile_cost=4.0,
       doc="torch.compile with CUDA graphs and inductor's autotuning: each GEMM's fastest kernel, benchmarked"),
    _D("stop_check", "sync", "tokengen.decode.stop_checks:sync_check", family=REFERENCE,
       doc="the article's check: the host reads the finished flag every step and waits for the device"),
    _D("stop_check", "pipelined", "tokengen.decode.stop_checks:pipelined_check", family=LAGGED, preset="pipelined",
       cuda_only=True, overrun=1, doc="the article's ping-pong: two streams, the host reads the last step's flag"),
    _D("stop_check", "deferred", "tokengen.decode.stop_checks:deferred_check", family=LAGGED, preset="deferred",
       cuda_only=True, overrun=1, doc="one stream, the host reads step i-1's pinned flag while the device runs step i"),
    _D("stop_check", "every_k", "tokengen.decode.every_k:every_k_check", family=LAGGED, preset="every_k",
       overrun=3, doc="the host reads the finished flag every 4th step only: 4x fewer waits, the same tokens"),
    _D("stop_check", "none", "tokengen.decode.stop_checks:no_check", family=BOUND, preset="nocheck", overrun=None,
       doc="the upper bound: never asks, always runs max_seqlen steps"),
    _D("allocator", "default", None, family=REFERENCE, doc="PyTorch's caching allocator as configured"),
    _D("allocator", "expandable", "tokengen.contract.machine.process_env:EXPANDABLE", family=LAGGED,
       preset="expandable", cuda_only=True,
       doc="expandable_segments: growing tensors extend a segment instead of fragmenting"),
    _D("engine", "loop", "tokengen.decode.loop:Generator", family=OURS,
       server="tokengen.engines.request_server:RequestServer",
       doc="this project's decode loop (and request server), composed from the other knobs"),
    _D("engine", "generate", "tokengen.engines.hf_generate:GenerateEngine", family=PEER, preset="hf_generate",
       doc="transformers' model.generate(), greedy, on the same prompts and stop rule"),
    _D("engine", "generate_batch", None, family=PEER, preset="hf_generate_batch",
       server="tokengen.engines.hf_generate_batch:GenerateBatchEngine",
       doc="transformers' continuous batching (generate_batch's manager, paged attention), for requests"),
    _D("batching", "static", None, family=REFERENCE, doc="requests batch after batch: a batch ends with its longest"),
    _D("batching", "continuous", None, family=LAGGED, preset="continuous",
       doc="a slot takes the next waiting request as soon as its own ends"),
)
KNOBS = tuple(dict.fromkeys(d.knob for d in DECLARED))
"""The knobs declared here, in order (tokengen.contract.spec.KNOBS must list the same fields)."""


def values(knob: str) -> tuple[Declared, ...]:
    """A knob's declared values, its plain setting first."""
    return tuple(d for d in DECLARED if d.knob == knob)


def names(knob: str) -> tuple[str, ...]:
    return tuple(d.name for d in values(knob))


def declared(knob: str, name: str) -> Declared:
    """The declaration of one value; KeyError names the declared ones."""
    for d in values(knob):
        if d.name == name:
            return d
    raise KeyError(f"{knob}={name!r} is not declared: use one of {', '.join(names(knob))}")


def plain(knob: str) -> Declared:
    """The knob's plain setting (the first declared): what a preset name leaves unsaid."""
    return values(knob)[0]


def in_family(knob: str, *families: str) -> tuple[str, ...]:
    return tuple(d.name for d in values(knob) if d.family in families)


def load(knob: str, name: str, attribute: str = "impl"):
    """The implementation a value names (`impl`, or an engine's `server`), imported now; None if it names none."""
    path = getattr(declared(knob, name), attribute)
    if path is None:
        return None
    module, _, member = path.partition(":")
    return getattr(importlib.import_module(module), member)
