"""torch.compile's own start-up, done once in the warm parent a sweep forks its trials from.

The first torch.compile in a process imports dynamo, AOTAutograd and inductor (some 650 modules, networkx and
sympy's among them) and hashes torch's sources for its cache keys. On a 2-core CPU that is 1-1.5 s of every
compiled trial's first run, a third of a warm twin's load (sweeps/execution/compile_share.py), and none of it is
compiling. Imported by the forkserver (sweeps/execution/trial_process.py PRELOAD), it is in every fork.

Only imports and one hash: no thread, no process, nothing of CUDA (a fork must start CUDA afresh:
tests/sweeps/test_compiler_imports.py checks all three). On a CUDA build nothing is done: importing inductor
there imports triton, whose import is not shown harmless to the forked trials on a GPU (transformers' models are
not: tokengen/measure/model_imports.py).
"""

from __future__ import annotations

import importlib

from tokengen.measure.torch_build import cpu_build

COMPILER_MODULES = (
    "torch._dynamo",
    "torch._dynamo.backends.inductor",
    "torch._functorch.partitioners",
    "torch._functorch._aot_autograd.autograd_cache",
    "torch._inductor.async_compile",
    "torch._inductor.codecache",
    "torch._inductor.compile_fx",
    "torch._inductor.graph",
    "torch._inductor.lowering",
    "torch._inductor.scheduler",
    "torch._inductor.select_algorithm",
    "torch._inductor.fx_passes.joint_graph",
    "torch._inductor.fx_passes.post_grad",
    "torch._inductor.codegen.wrapper",
    "torch._inductor.codegen.cpp",
    "torch._inductor.codegen.cpp_wrapper_cpu",
)
"""Where the first compile's imports start; each pulls in the rest. A module this torch lacks is skipped."""


def preload() -> list[str]:
    """Import the compiler and hash torch's sources, on a CPU build; the modules imported."""
    if not cpu_build():
        return []
    done = []
    for name in COMPILER_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        done.append(name)
    try:
        from torch._inductor.codecache import torch_key

        torch_key()  # functools-cached: every fork reads it instead of hashing torch's sources again
    except (ImportError, AttributeError):
        pass
    return done


PRELOADED = preload()
