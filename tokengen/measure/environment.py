"""The facts a comparison across machines needs, recorded with every result."""

from __future__ import annotations

import os
import platform
import socket

import torch
import transformers

from tokengen.contract.machine.fingerprint import as_text, fingerprint, revision
from tokengen.contract.machine.fingerprint import facts as fingerprint_facts

# Datasheet memory bandwidth (GB/s): achieved weight streaming is reported against it.
PEAK_BANDWIDTH_GBS = {
    "L40S": 864.0,
    "A100-SXM4-80GB": 2039.0,
    "A100 80GB": 2039.0,
    "H100": 3350.0,  # SXM
    "H100 PCIe": 2000.0,
    "H100 NVL": 3900.0,
    "H200": 4800.0,
    "GH200": 4000.0,
}


def peak_bandwidth_gbs(gpu_name: str | None) -> float | None:
    if not gpu_name:
        return None
    for marker, gbs in sorted(PEAK_BANDWIDTH_GBS.items(), key=lambda kv: -len(kv[0])):
        if marker.lower() in gpu_name.lower():
            return gbs
    return None


def cuda_driver_version() -> str | None:
    try:
        import ctypes

        version = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
        return f"{version.value // 1000}.{version.value % 1000 // 10}"
    except OSError:
        return None


def environment(device: str, model: str) -> dict:
    on_cuda = device == "cuda" and torch.cuda.is_available()
    facts = fingerprint_facts(device, torch.get_num_threads(), model)
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
