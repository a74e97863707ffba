"""What a device can do. GPUs come from the contract's datasheet table (tokengen/contract/machine/gpus.py,
re-exported here for the cost model); a CPU differs too much between hosts for a table, so this host is measured
with numpy (a second of every core), the clock or the whole measurement injectable for tests. The measurement is
kept for the process and, for a day, in the user's cache folder under the host's name, CPU model, usable cores and
BLAS threads: each dry run or sweep of the day prices CPU trials from the same figures instead of a second of
every core each time (and of whatever else the machine was doing that second)."""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
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
KEPT_S = 24 * 3600.0  # how long a host's measurement is reused from the cache folder
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
CACHE_VARIABLE = "TOKENGEN_CACHE_DIR"  # a folder of its own (the tests give each run one)


def kept_file() -> Path:
    """Where this user's hosts' measurements are kept: $TOKENGEN_CACHE_DIR, else $XDG_CACHE_HOME/tokengen, else
    ~/.cache/tokengen."""
    folder = os.environ.get(CACHE_VARIABLE)
    if not folder:
        root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = os.path.join(root, "tokengen")
    return Path(folder) / "cpu_speed.json"


def host_name() -> str:
    """What a measurement holds for: the host, its CPU model, the cores this process may use, BLAS's threads."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), model)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = ",".join(os.environ.get(name, "") for name in THREAD_VARIABLES)
    return f"{platform.node()}|{model}|{cores} cores|threads {threads}|numpy {np.__version__}"


def _entries() -> dict:
    """The cache file's measurements by host; {} where there is none or it cannot be read."""
    try:
        kept = json.loads(kept_file().read_text())
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def _read_kept(host: str, now: float) -> CpuSpeed | None:
    try:
        kept = _entries()[host]
        speed = CpuSpeed(float(kept["gflops"]), float(kept["gbs"]))
        if 0 <= now - float(kept["measured_at"]) < KEPT_S and all(0 < v < math.inf for v in asdict(speed).values()):
            return speed
    except (ValueError, KeyError, TypeError):
        pass
    return None


def _keep(host: str, speed: CpuSpeed, now: float) -> None:
    """Adds this host's measurement to the file, read again so that what others kept during the measurement stays;
    written whole and moved into place. A cache folder that cannot be written only means the next process measures
    again."""
    path, kept = kept_file(), _entries()
    kept[host] = {**asdict(speed), "measured_at": now}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        scratch.write_text(json.dumps(kept, indent=1))
        os.replace(scratch, path)
    except OSError:
        pass


def cpu_speed(measure: Callable[[], CpuSpeed] | None = None) -> CpuSpeed:
    """This host's CpuSpeed, cached for the process: calibrate_cpu's, read from the cache folder where it holds
    this host's from the last day, else measured now and kept there. An injected `measure` is called, never kept."""
    global _cached
    if _cached is None:
        if measure is not None:
            _cached = measure()
        else:
            host, now = host_name(), time.time()
            _cached = _read_kept(host, now)
            if _cached is None:
                _cached = calibrate_cpu()
                _keep(host, _cached, now)
    return _cached


def forget_cpu_speed() -> None:
    """Drop the cached calibration (tests; a process whose thread count changed)."""
    global _cached
    _cached = None
