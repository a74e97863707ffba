"""What a device can do. GPUs come from the contract's datasheet table (tokengen/contract/machine/gpus.py,
re-exported here for the cost model); a CPU differs too much between hosts for a table, so this host is measured
once per process with numpy (about a second), the clock or the whole measurement injectable for tests."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tokengen.contract.machine.gpus import GPUS, Gpu, gpu_kind, gpu_spec  # noqa: F401

DEFAULT_GPU = "L40S"  # an unknown or unpinned GPU with no history: the project's example cluster (AWS g6e)


@dataclass(frozen=True)
class CpuSpeed:
    gflops: float  # float32 matmul, numpy's BLAS on this host
    gbs: float  # memory copy bandwidth (bytes read + written)


def calibrate_cpu(
    seconds: float = 1.0, clock: Callable[[], float] = time.perf_counter, matmul_size: int = 1024, copy_mib: int = 64
) -> CpuSpeed:
    """This host's float32 matmul GFLOP/s and copy GB/s, each repeated for half of `seconds` of `clock`."""
    a = np.ones((matmul_size, matmul_size), dtype=np.float32)
    src = np.ones(copy_mib * 2**18, dtype=np.float32)
    dst, rates = np.empty_like(src), []
    for work, amount in ((lambda: a @ a, 2.0 * matmul_size**3), (lambda: np.copyto(dst, src), 2.0 * src.nbytes)):
        work()  # warm: page faults, BLAS thread start-up
        start, done = clock(), 0
        while (elapsed := clock() - start) < seconds / 2 or not done:
            work()
            done += 1
        rates.append(amount * done / elapsed / 1e9)
    return CpuSpeed(*rates)


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
