"""compile=max-autotune: refused in one line without CUDA; on a GPU, the eager tokens, through CUDA graphs.

The GPU test is the `gpu` marker's (scripts/gpu_check.sh runs it): the tiny model, rows with their own
prompts ending at their own seeded lengths, float32 at full matmul precision, so an autotuned kernel
that rounds differently from the eager one shows as a different token.
"""

from __future__ import annotations

import pytest
import torch

from tokengen.cli import main
from tokengen.contract.rules import problem, resolve

WORKLOAD = dict(model="tiny", batch_size=4, max_seqlen=12, prompt_len=8, stop="uniform:3-12", seed=5)


def test_max_autotune_is_refused_in_one_line_on_a_cpu(capsys):
    assert main(["--model", "tiny", "--variant", "static_autotuned"]) == 2
    assert capsys.readouterr().err.strip() == "error: compile=max-autotune needs a CUDA device (got device=cpu)"


def test_max_autotune_without_a_static_cache_is_refused_before_it_compiles():
    spec = resolve("kv_cache", compile="max-autotune", device="cuda", model="tiny")
    assert problem(spec) == "compile=max-autotune needs cache=static: CUDA graphs want fixed shapes"


@pytest.mark.gpu
def test_on_a_gpu_max_autotune_returns_the_eager_tokens_through_cuda_graphs():
    from tokengen.decode.loop import Generator
    from tokengen.measure import compile_counters
    from tokengen.models import build_model

    model = build_model("tiny", "float32", "cuda", seed=0)
    want = Generator(model, resolve("static_cache", device="cuda", **WORKLOAD))()
    assert len({tuple(row) for row in want.tokens[:, 8:].tolist()}) == 4, "rows must differ to prove anything"
    torch._dynamo.reset()
    compile_counters.start()
    autotuned = Generator(model, resolve("static_autotuned", device="cuda", **WORKLOAD))
    got = autotuned()
    again = autotuned()
    counted = compile_counters.read("max-autotune")
    assert (got.steps, got.tokens.shape) == (want.steps, want.tokens.shape)
    assert torch.equal(got.tokens, want.tokens) and torch.equal(again.tokens, want.tokens)
    assert counted["cuda_graphs"] == "ran" and counted["compile_recompiles"] == 0, counted
