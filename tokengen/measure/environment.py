"""The facts a comparison across machines needs, recorded with every result."""

from __future__ import annotations

import os
import platform
import socket

import torch
import transformers

from tokengen.contract.machine.fingerprint import as_text, fingerprint, revision
from tokengen.contract.machine.fingerprint import facts as fingerprint_facts
from tokengen.contract.machine.gpus import gpu_of


def peak_bandwidth_gbs(gpu_name: str | None) -> float | None:
    """The datasheet memory bandwidth of a GPU named as CUDA names it (tokengen/contract/machine/gpus.py):
    achieved weight streaming is reported against it; None for no GPU or one the table lacks."""
    gpu = gpu_of(gpu_name)
    return gpu.bandwidth_gbs if gpu else None


def cuda_driver_version() -> str | None:
    try:
        import ctypes

        version = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
        return f"{version.value // 1000}.{version.value % 1000 // 10}"
    except OSError:
        return None


def environment(device: str, model: str, draft: str | None = None) -> dict:
    on_cuda = device == "cuda" and torch.cuda.is_available()
    facts = fingerprint_facts(device, torch.get_num_threads(), model, draft)
    return {
        "env_fingerprint": fingerprint(facts),
        "env_facts": as_text(facts),
        "env_revision": revision(),  # None where the code came through Ray: the sweep's driver fills it in
        "env_host": socket.gethostname(),
        "env_python": platform.python_version(),
        "env_torch": torch.__version__,
        "env_transformers": transformers.__version__,
        "env_cuda": torch.version.cuda if on_cuda else None,
        "env_driver": cuda_driver_version() if on_cuda else None,
        "env_gpu_name": torch.cuda.get_device_name() if on_cuda else None,
        "env_cpu": platform.processor() or platform.machine(),
        "env_cpu_count": os.cpu_count(),
        "env_torch_threads": torch.get_num_threads(),
        "env_alloc_conf": os.environ.get("PYTORCH_ALLOC_CONF"),
        "env_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),  # what the scheduler gave the trial
    }
