"""torch.compile's own counters, read per trial: a graph break or a recompile is counted, a clean
compile is not, and a reduce-overhead trial whose CUDA graphs were skipped says `skipped`."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from tokengen.measure import compile_counters

pytestmark = pytest.mark.slow  # compiles


def test_graph_breaks_and_recompiles_are_counted_and_a_clean_compile_is_not():
    torch._dynamo.reset()

    def clean(x):
        return torch.sin(x) * 2

    def broken(x):
        y = torch.sin(x)
        torch._dynamo.graph_break()
        return y * 2

    compile_counters.start()
    fn = torch.compile(clean)
    fn(torch.ones(4))
    fn(torch.ones(4))
    got = compile_counters.read("default")
    assert (got["compile_graph_breaks"], got["compile_recompiles"]) == (0, 0) and got["compile_graphs"] == 1
    assert got["cuda_graphs"] is None

    compile_counters.start()
    torch.compile(broken)(torch.ones(4))
    got = compile_counters.read("default")
    assert got["compile_graph_breaks"] == 1 and "graph break" in got["compile_notes"]

    compile_counters.start()
    torch._dynamo.reset()
    again = torch.compile(clean, dynamic=False)
    again(torch.ones(4))
    again(torch.ones(5))  # a new static shape: dynamo recompiles
    assert compile_counters.read("default")["compile_recompiles"] == 1


def test_a_reduce_overhead_trial_whose_graphs_were_skipped_says_so():
    compile_counters.start()
    assert compile_counters.read("reduce-overhead")["cuda_graphs"] == "ran"
    counters["inductor"]["cudagraph_skips"] += 1  # what torch bumps when it logs "skipping cudagraphs due to ..."
    got = compile_counters.read("reduce-overhead")
    assert (got["cuda_graphs"], got["cudagraph_skips"]) == ("skipped", 1)
    assert compile_counters.read("off") == dict.fromkeys(got)


def test_a_compiled_trial_records_what_its_compile_did():
    from tokengen.contract.rules import resolve
    from tokengen.measure.trial import run_trial

    record = run_trial(resolve("static_compiled", model="tiny", batch_size=2, max_seqlen=4, warmup=1, runs=2))
    assert record["compile_graphs"] >= 1
    assert (record["compile_graph_breaks"], record["compile_recompiles"]) == (0, 0), record["compile_notes"]
    assert record["cuda_graphs"] is None
    assert record["compile_cache"] in ("cold", "warm", "partly warm")  # torch's cache counters are read


def test_a_compile_from_a_shared_cache_says_it_was_warm():
    compile_counters.start()
    counters["inductor"]["fxgraph_cache_hit"] += 2  # what inductor bumps for each graph found in its cache
    assert compile_counters.read("default")["compile_cache"] == "warm"
    counters["inductor"]["fxgraph_cache_miss"] += 1
    assert compile_counters.read("default")["compile_cache"] == "partly warm"
    compile_counters.start()
    counters["inductor"]["fxgraph_cache_miss"] += 1
    assert compile_counters.read("reduce-overhead")["compile_cache"] == "cold"
    assert compile_counters.read("off")["compile_cache"] is None
