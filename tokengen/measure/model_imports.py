"""transformers' model code, imported once in the warm parent a sweep forks its trials from, without starting CUDA.

A fork of a parent that has started CUDA fails at its first CUDA call. Importing a transformers model imports its
quantizers and with them torchao, whose modules ask the GPU's compute capability at import (torchao/utils.py's
is_sm_at_least_89 and its kind): on an H200 all 15 trials of +grid=gpu failed "Cannot re-initialize CUDA in forked
subprocess", and a fork check there found the parent fork-safe after torch and tokengen.measure.trial, poisoned
after transformers' gpt2 module. So on a CUDA build the parent imports the models with torchao hidden (transformers
then skips its torchao quantizer's imports; a trial that quantizes imports torchao itself, tokengen/knobs/quant.py),
asks is_available() through NVML, and stops the import at anything that would start CUDA: then each trial imports
the models itself. On a CPU build nothing can reach a GPU and the models are imported as they are.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from contextlib import contextmanager, nullcontext

import torch

from tokengen.measure.torch_build import cpu_build

MODEL_MODULES = ("transformers.models.gpt2.modeling_gpt2", "transformers.models.llama.modeling_llama")
HIDDEN = "torchao"  # asks the GPU at import; `sys.modules[name] = None` makes find_spec and import see no such package
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"  # is_available() counts GPUs through NVML instead of starting CUDA


class StartedCuda(RuntimeError):
    """An import in the warm parent tried to start CUDA."""


@contextmanager
def cuda_left_alone():
    """Imports here cannot start CUDA: torchao hidden, is_available() through NVML, and torch's CUDA start raising
    StartedCuda. Everything is put back after, and transformers asks for torchao again in the forks."""
    saved_env, saved_init = os.environ.get(NVML_CHECK), torch.cuda._lazy_init

    def refuse():
        raise StartedCuda("an import in the trials' warm parent tried to start CUDA")

    sys.modules[HIDDEN] = None
    os.environ[NVML_CHECK] = "1"
    torch.cuda._lazy_init = refuse
    try:
        yield
    finally:
        torch.cuda._lazy_init = saved_init
        if saved_env is None:
            os.environ.pop(NVML_CHECK, None)
        else:
            os.environ[NVML_CHECK] = saved_env
        if sys.modules.get(HIDDEN, 0) is None:
            del sys.modules[HIDDEN]
        asked = getattr(sys.modules.get("transformers.utils.import_utils"), "is_torchao_available", None)
        if hasattr(asked, "cache_clear"):  # it cached "no torchao" (transformers 5.17 and 5.24 cache it)
            asked.cache_clear()


def preload(modules: Iterable[str] = MODEL_MODULES) -> list[str]:
    """Import the model code, fenced off from CUDA on a CUDA build; the modules imported, up to one that would
    have started CUDA (that one and those after it each trial imports itself)."""
    done = []
    with nullcontext() if cpu_build() else cuda_left_alone():
        for name in modules:
            try:
                importlib.import_module(name)
            except StartedCuda:
                break
            done.append(name)
    return done


PRELOADED = preload()
