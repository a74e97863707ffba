"""torch.compile's settings per compile mode, as keyword arguments (tokengen.contract.declarations names them).

Keyword arguments rather than a wrapper, because two callers compile: the decode loop with
`torch.compile(model, **options)` and transformers' generate() with `CompileConfig(**options)`, and
both take the same `mode`.
"""

from __future__ import annotations

DEFAULT = {"mode": "default"}  # inductor, no CUDA graphs
REDUCE_OVERHEAD = {"mode": "reduce-overhead"}  # inductor + CUDA graphs: a decode step replays as one launch

MAX_AUTOTUNE = {"mode": "max-autotune"}
"""compile=max-autotune: inductor benchmarks candidate kernels for each GEMM and keeps the fastest,
and replays the decode step as CUDA graphs, as reduce-overhead does.

Why a mode of its own: a decode step is a handful of skinny GEMMs (batch rows x hidden), where the
default heuristics' kernel choice can leave bandwidth unused; autotuning pays for it once, at compile
time (minutes rather than seconds), which the pricing prior's compile_cost and the record's
first_run_s show. CUDA-only: inductor autotunes Triton kernels, which a CPU does not run.
"""
