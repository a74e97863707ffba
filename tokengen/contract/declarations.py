"""Every knob and every value of it, declared once: what it is, where it acts, its facts, its one-line doc.

A new optimization is its implementation module plus one entry below (a new knob: one `Knob` and its
values). The spec's knob fields, the CLI's flags and choices, Hydra's schema, the rules (each fact's, for any
knob), the presets (declared below as families of values picked by their facts) and their names, every report
pairing, the pricing's keys, the terminal table and MLflow's params all read these entries, so none of them spells
a knob or a value again. Torch-free: the planner and the
report import it without torch; `load` imports an implementation only where a trial runs.

A knob says where it acts (the model as built, around each decode step, the loop, the process's
environment, the engine), what a report sets its values beside (the workload's baseline, the same trial
at the knob's plain value, a family of peers, the library's generate()), whether its values change the
compiled graph, and whether it was in the first release's trial key. A value says whether it keeps the
reference's exact tokens (`exact`), does the same math with other kernels (`equivalent`) or changes the
numbers (`lossy`): the last two are held to an accuracy gate instead of a checksum (tokengen/contract/fidelity.py);
a `speculative` value's tokens are proven against its plain twin's, bit for bit.

Families group a stop check's values by the peer a report sets them beside: a lagged check beside the
reference one (table (d)), every checked loop beside the no-check bound (table (e)).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

REFERENCE, LAGGED, BOUND = "reference", "lagged", "bound"  # stop checks: sync, fewer host waits, no check at all
EAGER, COMPILED = "eager", "compiled"  # compile modes
RECOMPUTE, CACHED = "recompute", "cached"  # caches: the full prefix every step, or keys and values kept
OURS, PEER = "ours", "peer"  # engines: this project's loops, transformers' own
EXACT, EQUIVALENT, LOSSY = "exact", "equivalent", "lossy"  # what a value keeps of the reference's numbers
SPECULATIVE = "speculative"  # or: its tokens are proven against its plain twin's, bit for bit (speculative decoding)
MODEL, STEP, LOOP, PROCESS, ENGINE = "model", "step", "loop", "process", "engine"  # where a knob acts
BASELINE, PLAIN, FAMILY = "baseline", "plain", "family"  # what a report sets a knob's values beside (or PEER)


@dataclass(frozen=True)
class Knob:
    field: str  # the TrialSpec field
    acts: str  # MODEL: on the built model, once, before any compile; STEP: around each decode step; LOOP: the
    # decode loop's own parts; PROCESS: the trial process's environment; ENGINE: which code generates
    beside: str  # what a report compares a value against: BASELINE (the workload's full recompute), PLAIN (the
    # same trial at the knob's plain value), FAMILY (its family's peer: stop checks), PEER (generate())
    graph: bool  # its values change what torch.compile traces: part of a compiled graph's key
    doc: str
    keyed: bool = False  # hashed into the trial key at every value (the first release's knobs); else only away
    # from its plain value, so a new knob keeps every existing key
    advances: bool = False  # LOOP: its values' `impl` is how a generation advances (an Advance factory, asked by the
    # loop and the request server: tokengen/decode/advance.py); its plain value makes one token per row per forward


@dataclass(frozen=True)
class Declared:
    knob: str  # the TrialSpec field
    name: str  # the value users type
    impl: str | None  # "module:attribute" of what runs it; None: nothing extra runs (the knob's plain setting)
    doc: str  # one line: what it does and why it may be faster
    family: str = ""  # the group a report compares against its peer (see the module docstring)
    preset: str = ""  # the word it adds to a generated variant name ("" at the knob's plain setting)
    cuda_only: bool = False  # needs a CUDA device; refused in one line elsewhere
    min_capability: tuple[int, int] | None = None  # CUDA compute capability it needs (8.0: A100, L40S, H100, H200)
    dtypes: tuple[str, ...] = ()  # the only dtypes it runs in (empty: any)
    fidelity: str = EXACT  # EXACT | EQUIVALENT | LOSSY | SPECULATIVE: the proof its tokens are held to
    weight_bits: int | None = None  # bits per weight of the model's linear layers (None: the dtype's)
    requires: tuple[tuple[str, str], ...] = ()  # other knobs' values it needs, (knob, value) each
    no_mask: bool = False  # attention backends that take no explicit mask: refused with a masked cache on CUDA
    cuda_graphs: bool = False  # compile modes: replays decode as CUDA graphs, so the cache must keep fixed shapes
    overrun: int | None = 0  # stop checks: steps it may enqueue past sync's end; None: always runs max_seqlen steps
    reads_behind: int = 0  # stop checks: a wait after step i reads step i - reads_behind's flag (when tokens are held)
    fixed_shapes: bool = False  # caches: tensors allocated once at fixed addresses (CUDA graphs, compiled presets)
    masked: bool = False  # caches: the model is given an explicit attention mask (a `no_mask` backend cannot run it)
    compile_cost: float = 0.0  # compile modes: compile time against compile=default (the pricing prior's guess)
    server: str | None = None  # engines: "module:attribute" of what serves request workloads (requests > 0)
    overhead_s: float = 0.0  # engines: host seconds a step costs beyond our loop's (the pricing prior's guess)
    greedy_only: bool = False  # refused with any sampling but greedy
    max_batch: int | None = None  # the most rows (batch_size) it generates at once; None: any
    needs_cache: bool = False  # needs a cache that keeps keys and values (family CACHED), not the full recompute
    not_with_requests: bool = False  # runs one batch: refused with requests > 0
    requests_only: bool = False  # serves requests: refused with requests = 0
    compiles_fixed_only: bool = False  # compiles a fixed-shape cache only (generate() leaves a DynamicCache eager)
    owns: str = ""  # what it brings of its own instead of what it `requires`, as its refusal says ("stop check")
    needs_draft: bool = False  # proposes with the model's draft companion: refused for a model with none
    advancing_requires: tuple[tuple[str, str], ...] = ()  # engines: other knobs' values it needs to run an advancing
    # knob's value its own way (generate()'s own speculation: eager, on a dynamic cache)


# fmt: off
# (the tables read best one declaration to a line or two: the formatter leaves them as written)
KNOB_DECLARATIONS: tuple[Knob, ...] = (
    Knob("cache", LOOP, BASELINE, graph=True, keyed=True, doc="what a step feeds the model: the whole prefix, or kept keys and values"),
    Knob("compile", LOOP, BASELINE, graph=True, keyed=True, doc="how the decode step runs: eager, or compiled by torch.compile"),
    Knob("stop_check", LOOP, FAMILY, graph=False, keyed=True, doc="when the host learns every row has ended"),
    Knob("allocator", PROCESS, PLAIN, graph=False, keyed=True, doc="the CUDA caching allocator's configuration"),
    Knob("engine", ENGINE, PEER, graph=True, doc="which code generates: this project's loop or transformers' own"),
    Knob("batching", LOOP, PLAIN, graph=False, doc="how request workloads fill the batch's slots"),
    Knob("quant", MODEL, PLAIN, graph=True, doc="weight-only quantization of the model's linear layers"),
    Knob("attention", STEP, PLAIN, graph=True, doc="the scaled-dot-product-attention backend a step may use"),
    Knob("speculate", LOOP, PLAIN, graph=True, advances=True,
         doc="greedy speculative decoding: k tokens proposed, verified in one forward of k + 1 positions"),
)

_D = Declared
DECLARED: tuple[Declared, ...] = (
    _D("cache", "none", "tokengen.decode.caches:NoCache", family=RECOMPUTE, preset="baseline", masked=True,
       doc="the article's baseline: recompute the whole prefix every step, O(N^2) in total"),
    _D("cache", "dynamic", "tokengen.decode.caches:DynamicKV", family=CACHED, preset="kv_cache",
       doc="transformers' DynamicCache: keys and values grow by one column per step"),
    _D("cache", "static", "tokengen.decode.caches:StaticKV", family=CACHED, preset="static_cache", fixed_shapes=True,
       masked=True,
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
       cuda_only=True, overrun=1, reads_behind=1,
       doc="the article's ping-pong: two streams, the host reads the last step's flag"),
    _D("stop_check", "deferred", "tokengen.decode.stop_checks:deferred_check", family=LAGGED, preset="deferred",
       cuda_only=True, overrun=1, reads_behind=1,
       doc="one stream, the host reads step i-1's pinned flag while the device runs step i"),
    _D("stop_check", "every_k", "tokengen.decode.every_k:every_k_check", family=LAGGED, preset="every_k",
       overrun=3, doc="the host reads the finished flag every 4th step only: 4x fewer waits, the same tokens"),
    _D("stop_check", "none", "tokengen.decode.stop_checks:no_check", family=BOUND, preset="nocheck", overrun=None,
       doc="the upper bound: never asks, always runs max_seqlen steps"),
    _D("allocator", "default", None, doc="PyTorch's caching allocator as configured"),
    _D("allocator", "expandable", "tokengen.contract.machine.process_env:EXPANDABLE",
       preset="expandable", cuda_only=True,
       doc="expandable_segments: growing tensors extend a segment instead of fragmenting"),
    _D("engine", "loop", "tokengen.decode.loop:Generator", family=OURS,
       server="tokengen.engines.request_server:RequestServer",
       doc="this project's decode loop (and request server), composed from the other knobs"),
    _D("engine", "generate", "tokengen.engines.hf_generate:GenerateEngine", family=PEER, preset="hf_generate",
       overhead_s=0.5e-3, greedy_only=True, requires=(("stop_check", "sync"),), owns="stop check",
       compiles_fixed_only=True, not_with_requests=True, advancing_requires=(("cache", "dynamic"), ("compile", "off")),
       doc="transformers' model.generate(), greedy, on the same prompts and stop rule"),
    _D("engine", "generate_batch", None, family=PEER, preset="hf_generate_batch",
       server="tokengen.engines.hf_generate_batch:GenerateBatchEngine", overhead_s=1.0e-3, greedy_only=True,
       requires=(("cache", "static"), ("compile", "off"), ("stop_check", "sync"), ("batching", "continuous")),
       owns="batching, paged cache and loop", requests_only=True,
       doc="transformers' continuous batching (generate_batch's manager, paged attention), for requests"),
    _D("batching", "static", None, doc="requests batch after batch: a batch ends with its longest"),
    _D("batching", "continuous", None, preset="continuous", requests_only=True,
       doc="a slot takes the next waiting request as soon as its own ends"),
    _D("quant", "none", None, doc="the model's weights in the trial's dtype"),
    _D("quant", "int8", "tokengen.knobs.quant:INT8", preset="int8", fidelity=LOSSY, weight_bits=8,
       doc="weight-only int8 (torchao): a quarter of float32's weight bytes per step, dequantized in the matmul"),
    _D("quant", "int4", "tokengen.knobs.quant:INT4", preset="int4", fidelity=LOSSY, weight_bits=4, cuda_only=True,
       min_capability=(8, 0), dtypes=("bfloat16",),
       doc="weight-only int4 (torchao, tinygemm's tile-packed layout): a quarter of bfloat16's weight bytes"),
    _D("attention", "auto", None, doc="torch picks the fastest SDPA backend that can run the step"),
    _D("attention", "math", "tokengen.knobs.attention:MATH", preset="sdpa_math", fidelity=EQUIVALENT,
       doc="SDPA's reference math kernel: unfused matmuls and softmax, every input shape"),
    _D("attention", "efficient", "tokengen.knobs.attention:EFFICIENT", preset="sdpa_efficient", fidelity=EQUIVALENT,
       cuda_only=True, doc="memory-efficient attention (xFormers' kernel): tiles without materializing the scores"),
    _D("attention", "flash", "tokengen.knobs.attention:FLASH", preset="sdpa_flash", fidelity=EQUIVALENT, no_mask=True,
       doc="FlashAttention: fused, tiled, online softmax; on CUDA it takes no explicit mask"),
    _D("attention", "cudnn", "tokengen.knobs.attention:CUDNN", preset="sdpa_cudnn", fidelity=EQUIVALENT,
       cuda_only=True, min_capability=(8, 0), doc="cuDNN's fused attention"),
    _D("speculate", "none", None, doc="one forward, one token per row per step"),
    *(_D("speculate", f"lookup{k}", f"tokengen.decode.speculate:LOOKUP{k}", family="lookup", preset=f"lookup{k}",
         fidelity=SPECULATIVE, greedy_only=True, max_batch=1, needs_cache=True, not_with_requests=True,
         doc=f"prompt lookup: the {k} tokens after the row's last 3-, 2- or 1-gram's latest earlier match, verified")
      for k in (2, 4, 8)),
    *(_D("speculate", f"draft{k}", f"tokengen.decode.speculate:DRAFT{k}", family="draft", preset=f"draft{k}",
         fidelity=SPECULATIVE, greedy_only=True, max_batch=1, needs_cache=True, not_with_requests=True,
         needs_draft=True, doc=f"a draft model (the model's smaller companion) proposes {k} tokens greedily, verified")
      for k in (2, 4, 8)),
)
EVERY, AWAY = "every", "away"  # a preset axis's values: every one of its knob's, or every one but the plain one


@dataclass(frozen=True)
class Presets:
    """A family of presets (tokengen/contract/variants.py names them from their values' words): the values each axis
    picks, crossed in order, every other knob at its plain value and each picked value's `requires` held."""

    doc: str
    axes: tuple[tuple[str, object], ...]  # (knob, EVERY | AWAY | {fact: wanted}) in crossing order; a wanted tuple:
    # any of its members


def presets(doc: str, **axes) -> Presets:
    return Presets(doc, tuple(axes.items()))


_GROWING = {"family": CACHED, "fixed_shapes": False}
_GENERATE = {"family": PEER, "not_with_requests": True}
PRESETS: tuple[Presets, ...] = (
    presets("the article's baseline, the reference every variant is checked against", cache={"family": RECOMPUTE}),
    presets("our loop on a growing cache, eager, with every stop check", cache=_GROWING, stop_check=EVERY),
    presets("a growing cache under each other allocator", cache=_GROWING, allocator=AWAY),
    presets("our loop on fixed shapes (what a compiled step keeps): every compile mode, every stop check",
            cache={"fixed_shapes": True}, compile=EVERY, stop_check=EVERY),
    presets("request workloads: fixed shapes, every compile mode, every stop check that ends a request, refilled slots",
            cache={"fixed_shapes": True}, compile=EVERY, stop_check={"family": (REFERENCE, LAGGED)},
            batching={"requests_only": True}),
    presets("generate() on its own growing cache", engine=_GENERATE, cache=_GROWING),
    presets("generate() on fixed shapes, eager and compiled", engine=_GENERATE, cache={"fixed_shapes": True},
            compile=EVERY),
    presets("transformers' request server with what it requires", engine={"family": PEER, "requests_only": True}),
)
"""The presets `all` expands to, in this order; a value of a knob an axis crosses joins them by its facts alone."""
# fmt: on


KNOBS = tuple(k.field for k in KNOB_DECLARATIONS)
"""The knobs declared here, in order: TrialSpec's knob fields are made from them (tokengen.contract.spec)."""
assert set(KNOBS) == {d.knob for d in DECLARED}, "every value belongs to a declared knob, every knob has values"


def declare(new: Knob, *new_values: Declared, new_presets: tuple[Presets, ...] = ()) -> None:
    """Declares a knob and its values (its plain one first), and any presets of its own, at run time, as if written
    above: a plug-in's way in. Call it before anything imports tokengen.contract.spec, whose TrialSpec takes its knob
    fields from here (and tokengen.contract.variants, which makes the presets once)."""
    global KNOB_DECLARATIONS, DECLARED, KNOBS, PRESETS
    if new.field in KNOBS or not new_values or any(v.knob != new.field for v in new_values):
        raise ValueError(f"knob {new.field!r}: declared already, or given no values of its own")
    KNOB_DECLARATIONS, DECLARED = (*KNOB_DECLARATIONS, new), (*DECLARED, *new_values)
    KNOBS, PRESETS = (*KNOBS, new.field), (*PRESETS, *new_presets)


def knob(field: str) -> Knob:
    """A knob's declaration; KeyError names the declared ones."""
    for k in KNOB_DECLARATIONS:
        if k.field == field:
            return k
    raise KeyError(f"{field!r} is not a declared knob: use one of {', '.join(KNOBS)}")


def knobs_where(**facts) -> tuple[str, ...]:
    """The knobs whose declarations have every fact given (`acts=MODEL`, `graph=True`, `beside=PLAIN`)."""
    return tuple(k.field for k in KNOB_DECLARATIONS if all(getattr(k, f) == v for f, v in facts.items()))


def knobs_except(*fields: str) -> list[str]:
    """Every knob but these: what a report holds equal when it compares the values of `fields`."""
    return [k for k in KNOBS if k not in fields]


_INDEX: tuple = ((), {}, {})  # (DECLARED as indexed, knob -> its values, (knob, name) -> value)


def _index() -> tuple:
    """DECLARED by knob and by (knob, name), made again whenever DECLARED is another tuple (`declare`): a
    grid's planning asks for hundreds of thousands of values, and a scan of DECLARED each time would be most of it."""
    global _INDEX
    if _INDEX[0] is not DECLARED:
        by_knob: dict[str, list[Declared]] = {}
        for d in DECLARED:
            by_knob.setdefault(d.knob, []).append(d)
        _INDEX = (DECLARED, {k: tuple(v) for k, v in by_knob.items()}, {(d.knob, d.name): d for d in DECLARED})
    return _INDEX


def values(knob: str) -> tuple[Declared, ...]:
    """A knob's declared values, its plain setting first."""
    return _index()[1].get(knob, ())


def names(knob: str) -> tuple[str, ...]:
    return tuple(d.name for d in values(knob))


def declared(knob: str, name: str) -> Declared:
    """The declaration of one value; KeyError names the declared ones."""
    found = _index()[2].get((knob, name))
    if found is not None:
        return found
    raise KeyError(f"{knob}={name!r} is not declared: use one of {', '.join(names(knob))}")


def plain(knob: str) -> Declared:
    """The knob's plain setting (the first declared): what a preset name leaves unsaid."""
    return values(knob)[0]


def value_of(knobs: dict, field: str) -> Declared | None:
    """The declaration of a trial's value of one knob (the plain one where the trial has none: an older
    record), or None for a value no longer declared."""
    name = knobs.get(field)
    name = plain(field).name if name is None or name != name or name == "" else str(name)
    try:
        return declared(field, name)
    except KeyError:
        return None


def trial_values(knobs: dict) -> list[Declared]:
    """Every knob's declared value for a trial (dict of knob -> value; a spec's `.knobs`, a record, a row)."""
    return [d for d in (value_of(knobs, k) for k in KNOBS) if d is not None]


def fidelity_of(knobs: dict) -> str:
    """The proof a trial's tokens are held to: exact unless some value is speculative, equivalent or lossy (lossy wins,
    then equivalent: a gated value's reference is every knob plain)."""
    kinds = {d.fidelity for d in trial_values(knobs)}
    for kind in (LOSSY, EQUIVALENT, SPECULATIVE):
        if kind in kinds:
            return kind
    return EXACT


def weight_bits(knobs: dict) -> int | None:
    """Bits per weight of the linear layers a trial's values declare (None: the dtype's own)."""
    bits = [d.weight_bits for d in trial_values(knobs) if d.weight_bits]
    return min(bits) if bits else None


def in_family(knob: str, *families: str) -> tuple[str, ...]:
    return tuple(d.name for d in values(knob) if d.family in families)


def load(knob: str, name: str, attribute: str = "impl"):
    """The implementation a value names (`impl`, or an engine's `server`), imported now; None if it names none."""
    path = getattr(declared(knob, name), attribute)
    if path is None:
        return None
    module, _, member = path.partition(":")
    return getattr(importlib.import_module(module), member)
