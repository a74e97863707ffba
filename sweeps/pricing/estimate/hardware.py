"""What a device can do: a datasheet table of GPUs, and a calibration of this host's CPU.

The prior needs a bandwidth and a peak rate per device. GPUs come from NVIDIA's datasheets (dense
figures: the "with sparsity" numbers are halved); a CPU differs too much between hosts for a table,
so this host is measured once per process with numpy (about a second) and the result cached. The
measurement is injectable (a clock, or a whole function) so tests are deterministic and fast.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Gpu:
    name: str
    bandwidth_gbs: float  # datasheet memory bandwidth
    bf16_tflops: float  # dense BF16/FP16 tensor-core peak
    tf32_tflops: float  # dense TF32 tensor-core peak (float32 with matmul_precision=high)
    fp32_tflops: float  # non-tensor FP32 peak (float32 with matmul_precision=highest)


# Sources: NVIDIA datasheets. L40S (2023): 864 GB/s GDDR6, BF16 362.05 dense (733 sparse), TF32 183,
# FP32 91.6. A100 (80GB SXM4): 2039 GB/s HBM2e, BF16 312, TF32 156, FP32 19.5; the 40GB SXM4: 1555 GB/s.
# H100 SXM5: 3.35 TB/s HBM3, BF16 989 dense (1979 sparse), TF32 494.5, FP32 67; H100 PCIe: 2.0 TB/s,
# 756 / 378 / 51; H100 NVL: 3.9 TB/s, 835 / 417.5 / 60. H200 SXM: 4.8 TB/s HBM3e, H100 SXM's compute.
# GH200 (96GB HBM3): 4.0 TB/s, H100 SXM's compute. Bandwidths agree with tokengen/environment.py.
GPUS: dict[str, Gpu] = {
    "L40S": Gpu("L40S", 864.0, 362.05, 183.0, 91.6),
    "A100": Gpu("A100 80GB SXM", 2039.0, 312.0, 156.0, 19.5),
    "A100 40GB": Gpu("A100 40GB SXM", 1555.0, 312.0, 156.0, 19.5),
    "H100": Gpu("H100 SXM", 3350.0, 989.0, 494.5, 67.0),
    "H100 PCIe": Gpu("H100 PCIe", 2000.0, 756.0, 378.0, 51.0),
    "H100 NVL": Gpu("H100 NVL", 3900.0, 835.0, 417.5, 60.0),
    "H200": Gpu("H200 SXM", 4800.0, 989.0, 494.5, 67.0),
    "GH200": Gpu("GH200", 4000.0, 989.0, 494.5, 67.0),
}

# (substrings that must all appear in the upper-cased name, table key): most specific first, so
# "NVIDIA GH200 480GB" is not taken for an H200, nor "NVIDIA H100 PCIe" for an SXM part.
_MARKERS = [
    (("GH200",), "GH200"), (("H200",), "H200"), (("H100", "NVL"), "H100 NVL"), (("H100", "PCIE"), "H100 PCIe"),
    (("H100",), "H100"), (("A100", "40G"), "A100 40GB"), (("A100",), "A100"), (("L40S",), "L40S"),
]

DEFAULT_GPU = "L40S"
"""Assumed for an unknown or unpinned GPU with no history: the project's example cluster (AWS g6e)."""


def gpu_kind(name) -> str | None:
    """The table key for a GPU name as CUDA (env_gpu_name) or Ray (accelerator_type) spells it;
    an unknown name comes back as given, None as None."""
    if not isinstance(name, str) or not name.strip():
        return None
    upper = name.upper()
    for parts, key in _MARKERS:
        if all(p in upper for p in parts):
            return key
    return name.strip()


def gpu_spec(kind: str | None) -> Gpu | None:
    return GPUS.get(kind) if kind else None


@dataclass(frozen=True)
class CpuSpeed:
    gflops: float  # float32 matmul, numpy's BLAS on this host
    gbs: float  # memory copy bandwidth (bytes read + written)


def _rate(work: Callable[[], object], amount: float, budget_s: float, clock: Callable[[], float]) -> float:
    """amount per second of `work`, repeated until `budget_s` of `clock` passed (once at least)."""
    work()  # warm: page faults, BLAS thread start-up
    start, done = clock(), 0
    while True:
        work()
        done += 1
        elapsed = clock() - start
        if elapsed >= budget_s:
            return amount * done / elapsed


def calibrate_cpu(seconds: float = 1.0, clock: Callable[[], float] = time.perf_counter,
                  matmul_size: int = 1024, copy_mib: int = 64) -> CpuSpeed:
    """This host's float32 matmul GFLOP/s and copy GB/s, half of `seconds` each. Inject `clock`
    (e.g. one that advances a fixed step per call) to make the result deterministic."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((matmul_size, matmul_size), dtype=np.float32)
    b = rng.standard_normal((matmul_size, matmul_size), dtype=np.float32)
    flops = _rate(lambda: a @ b, 2.0 * matmul_size**3, seconds / 2, clock)
    src = np.ones(copy_mib * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    copied = _rate(lambda: np.copyto(dst, src), 2.0 * src.nbytes, seconds / 2, clock)
    return CpuSpeed(gflops=flops / 1e9, gbs=copied / 1e9)


_cached: CpuSpeed | None = None


def cpu_speed(measure: Callable[[], CpuSpeed] = calibrate_cpu) -> CpuSpeed:
    """This host's CpuSpeed, measured on first use and cached for the process."""
    global _cached
    if _cached is None:
        _cached = measure()
    return _cached


def forget_cpu_speed() -> None:
    """Drop the cached calibration (tests; a process whose thread count changed)."""
    global _cached
    _cached = None
