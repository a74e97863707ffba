"""Named generator variants: the article's table rows and the ones beyond it.

A preset is a setting of the knobs (tokengen.contract.spec.KNOBS) and nothing else, so a variant's name can always be
recovered from a spec's knobs (`label_for`) and a grid may give knobs without naming a variant.
"""

from __future__ import annotations

from tokengen.contract.spec import KNOBS


def _knobs(cache: str, compile: str = "off", stop_check: str = "sync", allocator: str = "default",
           engine: str = "loop", batching: str = "static") -> dict:
    return {"cache": cache, "compile": compile, "stop_check": stop_check, "allocator": allocator, "engine": engine,
            "batching": batching}


VARIANTS: dict[str, dict] = {
    # the article, in the order of its tables
    "baseline": _knobs("none"),
    "kv_cache": _knobs("dynamic"),
    "kv_cache_expandable": _knobs("dynamic", allocator="expandable"),
    "static_cache": _knobs("static"),
    "static_compiled": _knobs("static", "default"),
    "static_compiled_pipelined": _knobs("static", "default", "pipelined"),
    # the article's upper bounds: no stop check at all
    "kv_cache_nocheck": _knobs("dynamic", stop_check="none"),
    "static_cache_nocheck": _knobs("static", stop_check="none"),
    "static_compiled_nocheck": _knobs("static", "default", "none"),
    # beyond the article: one stream, flag read one step late
    "kv_cache_deferred": _knobs("dynamic", stop_check="deferred"),
    "static_cache_deferred": _knobs("static", stop_check="deferred"),
    "static_compiled_deferred": _knobs("static", "default", "deferred"),
    # beyond the article: CUDA graphs via torch.compile(mode="reduce-overhead")
    "static_cudagraph": _knobs("static", "reduce-overhead"),
    "static_cudagraph_pipelined": _knobs("static", "reduce-overhead", "pipelined"),
    "static_cudagraph_deferred": _knobs("static", "reduce-overhead", "deferred"),
    "static_cudagraph_nocheck": _knobs("static", "reduce-overhead", "none"),
    # peers: transformers' own generate(), greedy, on the same workload (tokengen/engines/hf_generate.py)
    "hf_generate": _knobs("dynamic", engine="generate"),
    "hf_generate_static": _knobs("static", engine="generate"),
    "hf_generate_compiled": _knobs("static", "default", engine="generate"),
    "hf_generate_cudagraph": _knobs("static", "reduce-overhead", engine="generate"),  # generate()'s best on CUDA
    # request workloads (requests > 0, tokengen/engines/request_server.py): a slot takes the next request when its own
    # ends; static_cache and its compiled kin serve the same requests batch after batch
    "static_cache_continuous": _knobs("static", batching="continuous"),
    "static_compiled_continuous": _knobs("static", "default", batching="continuous"),
    "static_cudagraph_continuous": _knobs("static", "reduce-overhead", batching="continuous"),
    "static_cudagraph_deferred_continuous": _knobs("static", "reduce-overhead", "deferred", batching="continuous"),
    # peer: transformers' continuous batching (generate_batch's manager, paged attention)
    "hf_generate_batch": _knobs("static", engine="generate_batch", batching="continuous"),
}

CUSTOM = "custom"


def label_for(knobs: dict) -> str:
    """The preset whose knobs these are, or 'custom'."""
    wanted = {k: knobs[k] for k in KNOBS}
    for name, preset in VARIANTS.items():
        if preset == wanted:
            return name
    return CUSTOM
