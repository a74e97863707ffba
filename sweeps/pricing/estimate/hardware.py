"""What a device can do. GPUs come from the contract's datasheet table (tokengen/contract/machine/gpus.py,
re-exported here for the cost model); a CPU differs too much between hosts for a table, so this host is measured
with numpy (a second of every core), the clock or the whole measurement injectable for tests. The measurement is
kept for the process and, where the machine was quiet while it ran (the trials' own interference watch), for a day
in the user's cache folder under the host's name, CPU model, usable cores and BLAS threads: each dry run or sweep of
the day prices CPU trials from the same figures instead of a second of every core each time. A measurement taken
beside other work prices only its own run: one busy minute never misprices the day."""

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
from tokengen.contract.machine.user_folders import CACHE_VARIABLE, cache_folder  # noqa: F401 - tests/conftest.py's

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


_cached = None  # the process's Calibration
KEPT_S = 24 * 3600.0  # how long a host's measurement is reused from the cache folder
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def kept_file() -> Path:
    """Where this user's hosts' measurements are kept: in their own cache folder ($TOKENGEN_CACHE_DIR, else
    $XDG_CACHE_HOME/tokengen, else ~/.cache/tokengen), made and proven theirs by the one resolver of the project's
    folders (tokengen/contract/machine/user_folders.py). Where it cannot be made, or another user could plant a measurement in
    it, a file under os.devnull, which can be neither read nor written: the next process measures again."""
    try:
        return cache_folder() / "cpu_speed.json"
    except OSError:
        return Path(os.devnull) / "cpu_speed.json"


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


@dataclass(frozen=True)
class Calibration:
    """A measurement of this host and how it was taken: only a quiet one (no other process's work seen on our cores
    by the trials' own interference watch, tokengen/measure/interference.py) is kept for the day."""

    speed: CpuSpeed
    measured_at: float  # seconds since the epoch
    quiet: bool
    disturbed_by: str = ""  # the watch's reasons, where it was not quiet
    kept_in: str = ""  # the file it was read from or kept in; "" where it prices this process only

    def describe(self) -> str:
        """One line for the dry run's assumptions: which calibration priced the CPU trials."""
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.measured_at))
        figures = f"{self.speed.gflops:.1f} GFLOP/s matmul, {self.speed.gbs:.1f} GB/s copy"
        if not self.quiet:
            return (
                f"CPU calibration: {figures}, measured at {when} while the machine was busy ({self.disturbed_by}): "
                "it prices this run only and is not kept; run again on a quiet machine for a figure kept for the day"
            )
        where = f", kept in {self.kept_in}" if self.kept_in else ""
        return f"CPU calibration: {figures}, measured quietly at {when}{where}"


def _read_kept(host: str, now: float) -> Calibration | None:
    try:
        kept = _entries()[host]
        speed = CpuSpeed(float(kept["gflops"]), float(kept["gbs"]))
        if 0 <= now - float(kept["measured_at"]) < KEPT_S and all(0 < v < math.inf for v in asdict(speed).values()):
            return Calibration(speed, float(kept["measured_at"]), True, kept_in=str(kept_file()))
    except (ValueError, KeyError, TypeError):
        pass
    return None


def keep(host: str, calibration: Calibration) -> Calibration:
    """Adds this host's measurement to the file, read again so that what others kept during the measurement stays;
    written whole and moved into place. Where a measurement of the day is kept already, each figure's best stands:
    a machine is never faster than it can be, only slowed by others. A cache folder that cannot be written only
    means the next process measures again. Returns what stands."""
    path, kept = kept_file(), _entries()
    earlier = _read_kept(host, time.time())
    speed = calibration.speed
    if earlier is not None:
        speed = CpuSpeed(max(speed.gflops, earlier.speed.gflops), max(speed.gbs, earlier.speed.gbs))
    kept[host] = {**asdict(speed), "measured_at": calibration.measured_at}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        scratch.write_text(json.dumps(kept, indent=1))
        os.replace(scratch, path)
    except OSError:
        return calibration
    return Calibration(speed, calibration.measured_at, True, kept_in=str(path))


def forget_kept(host: str | None = None) -> None:
    """Drop this host's kept measurement (one its own trials contradicted): the next process measures again."""
    path, kept = kept_file(), _entries()
    if kept.pop(host or host_name(), None) is None:
        return
    try:
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        scratch.write_text(json.dumps(kept, indent=1))
        os.replace(scratch, path)
    except OSError:
        pass


def measure_watched(seconds: float = 1.0) -> Calibration:
    """calibrate_cpu inside the trials' interference watch, on every core this process may use: quiet where the
    watch would call a trial measured then `ok` (no contended reason)."""
    from tokengen.measure.interference import CONTENDED, Watch, verdict

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    watch = Watch(threads=cores, device="cpu").start()
    speed = calibrate_cpu(seconds)
    measurement, reasons = verdict(watch.stop(), cv=None, target_ci_reached=None)
    return Calibration(speed, time.time(), measurement != CONTENDED, "; ".join(reasons))


def cpu_calibration() -> Calibration:
    """This host's calibration, cached for the process: read from the cache folder where it holds this host's quiet
    one from the last day, else measured now, and kept there only where the machine was quiet."""
    global _cached
    if _cached is None:
        host = host_name()
        _cached = _read_kept(host, time.time())
        if _cached is None:
            measured = measure_watched()
            _cached = keep(host, measured) if measured.quiet else measured
    return _cached


NOMINAL = CpuSpeed(gflops=50.0, gbs=15.0)
"""A real sweep's CPU figures where no calibration is kept: it orders trials and never measures the host (a dry
run, or a sweep with a budget limit, does); about what a 2-core cloud VM's numpy gives (50 GFLOP/s, 15 GB/s)."""


def kept_or_nominal() -> CpuSpeed:
    """This host's kept quiet calibration where the day holds one (used, as cpu_calibration would), else NOMINAL:
    never a measurement."""
    global _cached
    if _cached is None:
        _cached = _read_kept(host_name(), time.time())
    return NOMINAL if _cached is None else _cached.speed


def used_calibration() -> Calibration | None:
    """The calibration this process priced CPU trials from, if it needed one."""
    return _cached


def cpu_speed(measure: Callable[[], CpuSpeed] | None = None) -> CpuSpeed:
    """This host's CpuSpeed (cpu_calibration's). An injected `measure` is called once, never kept."""
    global _cached
    if _cached is None and measure is not None:
        _cached = Calibration(measure(), time.time(), True)
    return cpu_calibration().speed


def forget_cpu_speed() -> None:
    """Drop the cached calibration (tests; a process whose thread count changed)."""
    global _cached
    _cached = None
