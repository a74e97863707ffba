"""Which torch build this is, for what the trials' warm parent may import: on a CPU build nothing can reach a GPU;
on a CUDA or ROCm build an import that asks the GPU anything poisons every fork, so the parent imports the model
code with CUDA fenced off (tokengen/measure/model_imports.py) and leaves the compiler to the trials
(tokengen/measure/compiler_imports.py)."""

from __future__ import annotations

import torch


def cpu_build() -> bool:
    """Whether this torch has neither CUDA nor ROCm."""
    return torch.version.cuda is None and getattr(torch.version, "hip", None) is None
