"""What torch.compile did in a trial, from torch's own bookkeeping: graphs, graph breaks, recompiles,
and the CUDA-graph skips of a compile mode that replays CUDA graphs (its declaration's cuda_graphs).

A graph break or a recompile silently turns a compiled row into a partly eager one, and a skipped
CUDA graph (torch says "skipping cudagraphs due to ...", once, in a log) turns a `static_cudagraph*`
row into compiled timings without CUDA graphs. So a trial reads the counters over its warmup and timed runs and
the record says what ran: `cuda_graphs` is `ran` or `skipped` for a CUDA-graph trial, and the
report never shows a skipped one as a CUDA-graph result.

torch 2.13's names: `torch._dynamo.utils.counters` ("graph_break": reason -> count; "stats":
"unique_graphs"; "inductor": "cudagraph_skips", "fxgraph_cache_hit", "fxgraph_cache_miss"), and `get_compilation_metrics()` (the last compiles,
each with its `recompile_reason` and `cudagraph_skip_reason`). Counters are process-global:
`start()` clears them, so a trial counts its own compiles only.
"""

from __future__ import annotations

from torch._dynamo.utils import clear_compilation_metrics, counters, get_compilation_metrics

from tokengen.contract.declarations import EAGER, declared
from tokengen.contract.names import COLD, PARTLY_WARM, WARM

RAN, SKIPPED = "ran", "skipped"


def start() -> None:
    counters.clear()
    clear_compilation_metrics()


def read(compile_mode: str) -> dict:
    """The record's compile fields; all None for an eager trial."""
    mode = declared("compile", compile_mode)
    if mode.family == EAGER:
        return {
            "compile_graphs": None,
            "compile_graph_breaks": None,
            "compile_recompiles": None,
            "cudagraph_skips": None,
            "cuda_graphs": None,
            "compile_notes": None,
            "compile_cache": None,
        }
    metrics = get_compilation_metrics()
    breaks = counters["graph_break"]
    recompiles = [m.recompile_reason for m in metrics if m.recompile_reason]
    skips = counters["inductor"]["cudagraph_skips"]
    skip_reasons = [m.cudagraph_skip_reason for m in metrics if getattr(m, "cudagraph_skip_reason", None)]
    notes = [f"graph break: {_first_line(r)}" for r in list(breaks)[:2]]
    notes += [f"recompile: {_first_line(r)}" for r in recompiles[:2]]
    notes += [f"cudagraphs skipped: {_first_line(r)}" for r in skip_reasons[:2]]
    graphed = mode.cuda_graphs
    return {
        "compile_graphs": counters["stats"]["unique_graphs"],
        "compile_graph_breaks": sum(breaks.values()),
        "compile_recompiles": len(recompiles),
        "cudagraph_skips": skips if graphed else None,
        "cuda_graphs": (SKIPPED if skips else RAN) if graphed else None,
        "compile_notes": "; ".join(notes) or None,
        "compile_cache": cache_state(
            counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]
        ),
    }


def cache_state(hits: int, misses: int) -> str | None:
    """Whether the compile was warm: a shared cache (sweep.inductor_cache=per_sweep) hands a twin the
    graphs another trial compiled, and its first run is then no measure of a cold compile."""
    if hits and not misses:
        return WARM
    if misses:
        return PARTLY_WARM if hits else COLD
    return None


def _first_line(text) -> str:
    return str(text).strip().splitlines()[0][:200] if str(text).strip() else "?"
