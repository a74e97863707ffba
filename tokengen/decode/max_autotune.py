"""compile=max-autotune: inductor benchmarks candidate kernels for each GEMM and keeps the fastest,
and replays the decode step as CUDA graphs, as reduce-overhead does.

Why a mode of its own: a decode step is a handful of skinny GEMMs (batch rows x hidden), where the
default heuristics' kernel choice can leave bandwidth unused; autotuning pays for it once, at compile
time (minutes rather than seconds), which the pricing prior's compile_cost and the record's
first_run_s show. CUDA-only: inductor autotunes Triton kernels, which a CPU does not run.
"""

from __future__ import annotations

OPTIONS = {"mode": "max-autotune"}
"""torch.compile's (and transformers' CompileConfig's) keyword arguments."""
