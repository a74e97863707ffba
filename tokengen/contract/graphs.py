"""Which trials compile the same graphs: the key a compiled graph is shared under across a sweep's trials and nodes.

torch.compile traces the decode step of a model of one shape: the model, dtype and device, the batch and the
cache's length (prompt_len + max_seqlen), the request workload's slots; and the knobs declared to change what it
traces (`graph=True` in tokengen/contract/declarations.py: the cache, the compile mode, the engine, the quantized
weights, the attention kernel). Twins that differ only elsewhere (their stop check, their allocator, how many
runs) trace the same graphs, so one cold compile serves them all (sweeps/execution/compile_share.py). A GPU
type is part of the key: a kernel autotuned or generated for one GPU is another GPU's cold compile. Versions,
the measuring code and the GPU's name are checked where the graphs are loaded, against the manifest they carry.
Torch-free: the planner, the pricing and the report key graphs without torch.
"""

from __future__ import annotations

import hashlib
import json
from typing import Mapping

from tokengen.contract.declarations import EAGER, knobs_where, value_of

SHAPE_FIELDS = ("model", "dtype", "device", "batch_size", "prompt_len", "max_seqlen", "requests")
GRAPH_FIELDS = (*SHAPE_FIELDS, *knobs_where(graph=True))
"""What decides the graphs a compile makes: the shape and the knobs declared to change the graph."""


def compiles(fields: Mapping) -> bool:
    """Whether the trial compiles anything (a compile mode outside the eager family; unknown counts as compiled)."""
    mode = value_of(dict(fields), "compile")
    return mode is None or mode.family != EAGER


def graph_key(fields: Mapping, accelerator_type: str | None = None) -> str | None:
    """The key of the graphs a trial compiles (None for an eager trial): the same for twins, on any machine."""
    if not compiles(fields):
        return None
    canonical = {name: str(fields.get(name)) for name in GRAPH_FIELDS}
    canonical["accelerator_type"] = str(accelerator_type or "")
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
