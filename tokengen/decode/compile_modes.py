"""torch.compile's settings per compile mode, as keyword arguments (tokengen.contract.declarations names them).

Keyword arguments rather than a wrapper, because two callers compile: the decode loop with
`torch.compile(model, **options)` and transformers' generate() with `CompileConfig(**options)`, and
both take the same `mode`.
"""

from __future__ import annotations

DEFAULT = {"mode": "default"}  # inductor, no CUDA graphs
REDUCE_OVERHEAD = {"mode": "reduce-overhead"}  # inductor + CUDA graphs: a decode step replays as one launch
