"""Did the machine interfere with the timed runs? Evidence gathered around them, and a verdict.

On a busy machine a trial's own clock can show a KV-cache "speedup" of 0.06x with nothing to say why. A
`Watch` around the timed runs records what that clock cannot see; `verdict` makes it `measurement`: ok | noisy
(spread above target after the most runs allowed) | contended (interference seen), with reasons.
Stdlib only, no torch; NVML (`pynvml`) is imported only for a CUDA trial; without it GPU fields are None.

A CPU trial's share is judged against what its own threads asked for, not against threads x wall: a
batch-1 tiny model keeps one thread of two busy, and that is the workload, not a neighbour. The kernel
keeps, per thread, the time it was runnable but waited for a core (the run-queue delay in
/proc/self/task/<tid>/schedstat, in ns); undisturbed it is near 0 however many threads the workload uses,
and a neighbour on our cores (or a cgroup quota: throttled time is run-queue time) makes it grow.
Others' CPU comes from /proc/stat, which counts whole ticks (1/CLK_TCK s) per core: over a few ms one
tick reads as several cores. So others' figure is given only over MIN_WINDOW_S or more (shorter is too
short to judge: no figure, no verdict from it) and never exceeds our cores; the threads' waits, in ns,
still judge a short window once they add up to MIN_WAIT_S (a wake-up's latency is tens of us).

Record fields (flat, as Watch.stop() and record_fields() return them):
    interference_device       str          the trial's device ("cpu", "cuda"); the CPU-share rule is for CPU trials
    interference_wall_s       float        seconds between start() and stop(): the timed runs
    interference_window_s     float|None   seconds others' CPU was read over (the runs); None without /proc/stat
    interference_threads      int          threads the trial was given
    interference_cores        int          cores this process may run on (affinity), else os.cpu_count()
    interference_cpu_util     float        our CPU time / (wall x min(threads, cores)): what the workload used
    interference_cpu_waited   float|None   of the time our threads wanted a core (ran + waited), the share
                                           they waited (schedstat, Linux); None where the kernel keeps none,
                                           or over a window too short to judge whose waits are under MIN_WAIT_S
    interference_others_cores float|None   cores-worth of CPU that others used on our cores over the window, at
                                           most our cores; None without /proc/stat or over a window under
                                           MIN_WINDOW_S (too short to judge)
    interference_load         float|None   1-minute load average, the larger of start and end
    interference_gpu_procs    int|None     other compute processes on our GPU (NVML), the larger of start and end
    interference_sm_clock_mhz int|None     SM clock, the lower of start and end (NVML)
    interference_throttle     str|None     clock event reasons seen at start or end, comma-joined, "" for none (NVML)
    measurement               str          ok | noisy | contended
    measurement_reasons       str          the reasons, "; "-joined, "" for ok

    watch = Watch(threads=torch.get_num_threads(), device=spec.device, nvml_handle=handle_or_callable).start()
    ...                                          # timed runs, device drained
    evidence = watch.stop()
    record.update(record_fields(evidence, cv=stats["runtime_cv"], target_ci_reached=runs.target_met))
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, NamedTuple

GPU_LAUNCHER_ENV = "TOKENGEN_GPU_LAUNCHER_PID"
"""The pid of an idle launcher holding the trial's GPU (benchmarks/article_table.py's parent while a row
runs in its own process): ours, not another tenant."""

OK, NOISY, CONTENDED = "ok", "noisy", "contended"
# others on a quarter of our cores: decode is memory-bound, so even "spare" cores share its bandwidth and cache
OTHERS_CORES_SHARE = 0.25
# a CPU trial's threads waited for a core over 20% of the time they wanted one: they got under 80% of the CPU
# the workload asks for, whatever its thread count
CPU_WAITED_MAX = 0.2
# /proc/stat's busy time is off by up to a tick per core over any window, cores x TICK_S / window cores-worth:
# over 10 ticks a tenth of each core, under half the OTHERS_CORES_SHARE it is judged against
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
MIN_WINDOW_S = 10 * TICK_S
# waits that add up to less over a short window are wake-up latencies (tens of us each), not a neighbour's slices
MIN_WAIT_S = 0.001
# more runnable than cores; judged only without /proc/stat, as it lags a minute and counts our own threads
LOAD_PER_CORE = 1.0
# any other compute context on our GPU takes its SMs and memory bandwidth in turns with ours
GPU_PROCS_MAX = 0
# a fixed run count pursues no CI target: above 10% CV a 2x-vs-1.8x comparison is not sure
NOISY_CV = 0.10
# NVML clock event reason bits (nvml.h nvmlClocksEventReason*); 0x1 gpu_idle is left out, the start is sampled drained
THROTTLE_REASONS = {
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
# heat or power limits from outside the trial; sw_power_cap is recorded, not judged: a heavy trial holds its own
# GPU at its power limit on every run, so it is the trial's speed, not interference
THROTTLE_CONTENDED = frozenset({"hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})


def host_busy_s(cpus: set[int] | None, stat: str = "/proc/stat") -> float | None:
    """CPU seconds every process spent on `cpus` (all when None) since boot, from /proc/stat; None off Linux."""
    try:
        with open(stat) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    ticks = 0
    for line in lines:
        if not line.startswith("cpu"):
            break
        name, *values = line.split()
        if name == "cpu" or (cpus is not None and int(name[3:]) not in cpus):
            continue
        v = [int(x) for x in values] + [0] * 8  # user nice system idle iowait irq softirq steal guest...
        ticks += v[0] + v[1] + v[2] + v[5] + v[6] + v[7]  # busy and stolen; guest time is inside user
    return ticks / os.sysconf("SC_CLK_TCK")


def threads_waited_s(task_dir: str = "/proc/self/task") -> dict[str, float] | None:
    """Each of our threads' seconds runnable but waiting for a core since it began (the run-queue delay,
    schedstat's second field, ns); None where the kernel keeps no schedstat (off Linux, some sandboxes)."""
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return None
    waited = {}
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/schedstat") as f:
                waited[tid] = int(f.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended since the listing
    return waited or None


def _waited_share(before: dict | None, after: dict | None, cpu_s: float) -> float | None:
    """Of the time our threads wanted a core (CPU time + waits), the share they waited; None when they wanted
    under MIN_WINDOW_S and waited under MIN_WAIT_S, where one wake-up's latency would make a share. A thread
    begun inside the window brings all its waits; one ended inside it takes its own away (an undercount)."""
    if before is None or after is None:
        return None
    waited = sum(max(0.0, s - before.get(tid, 0.0)) for tid, s in after.items())
    wanted = cpu_s + waited
    return waited / wanted if wanted >= MIN_WINDOW_S or waited >= MIN_WAIT_S else None


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _either(pick, a, b):  # of the start and end samples, those taken
    present = [x for x in (a, b) if x is not None]
    return pick(present) if present else None


class Sample(NamedTuple):
    """The counters at one instant: clocks, the host's busy seconds, load, our threads' waits, the GPU's state."""

    wall: float  # time.perf_counter()
    cpu: float  # our process's CPU seconds, every thread
    host: float | None  # host_busy_s() on our cores
    load: float | None
    waited: dict | None  # threads_waited_s()
    gpu: tuple = (None, None, None)  # other processes, SM clock MHz, clock event reason mask


class Watch:
    """start() before the timed runs, stop() after: the evidence dict of the module docstring (stop() only
    reads: a look before the runs end leaves the Watch running).

    `nvml_handle`: the pynvml handle of the trial's GPU, or a callable returning it (the caller knows the
    device; no torch here); else NVML's handle of the first CUDA_VISIBLE_DEVICES entry (index or UUID) or
    index 0. `ignore_pids`: our own helper processes on the GPU, not counted as others; so is a launcher
    that holds the GPU while it waits for this trial and names its pid in GPU_LAUNCHER_ENV.
    """

    def __init__(self, threads: int, device: str = "cpu", nvml_handle: Any = None, ignore_pids: Iterable[int] = ()):
        self.threads, self.device = max(1, int(threads)), device
        self._cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        self.cores = len(self._cpus) if self._cpus else os.cpu_count() or 1
        launcher = os.environ.get(GPU_LAUNCHER_ENV, "")
        self._ignore = {os.getpid(), *ignore_pids, *([int(launcher)] if launcher.isdigit() else [])}
        self._handle, self._nvml, self._start = nvml_handle, None, None

    def _sample(self) -> Sample:
        gpu = self._nvml() if self._nvml else (None, None, None)
        return Sample(
            time.perf_counter(), time.process_time(), host_busy_s(self._cpus), _load(), threads_waited_s(), gpu
        )

    def start(self) -> "Watch":
        if self.device.startswith("cuda"):
            self._nvml = _nvml_sampler(self._handle, self._ignore)
        self._start = self._sample()
        return self

    def stop(self) -> dict:
        if self._start is None:
            raise RuntimeError("Watch.stop() before start()")
        return self._evidence(self._start, self._sample())

    def _evidence(self, start: Sample, end: Sample) -> dict:
        wall, cpu_s = max(end.wall - start.wall, 1e-9), end.cpu - start.cpu
        window = None if start.host is None or end.host is None else wall
        others = None
        if window is not None and window >= MIN_WINDOW_S:
            others = min(max(0.0, (end.host - start.host - cpu_s) / window), float(self.cores))  # more is rounding
        (procs0, clock0, mask0), (procs1, clock1, mask1) = start.gpu, end.gpu
        masks = [m for m in (mask0, mask1) if m is not None]
        seen = {name for bit, name in THROTTLE_REASONS.items() for m in masks if m & bit}
        return {
            "interference_device": self.device,
            "interference_wall_s": wall,
            "interference_window_s": window,
            "interference_threads": self.threads,
            "interference_cores": self.cores,
            "interference_cpu_util": cpu_s / (wall * min(self.threads, self.cores)),
            "interference_cpu_waited": _waited_share(start.waited, end.waited, cpu_s),
            "interference_others_cores": others,
            "interference_load": _either(max, start.load, end.load),
            "interference_gpu_procs": _either(max, procs0, procs1),
            "interference_sm_clock_mhz": _either(min, clock0, clock1),
            "interference_throttle": ",".join(sorted(seen)) if masks else None,
        }


def _nvml_sampler(handle: Any, ignore: set[int]) -> Callable[[], tuple] | None:
    """A reader of (other processes, SM clock MHz, clock event reason mask) on the GPU, or None.

    In a container NVML lists host pids, so where none of ours is listed one entry is taken for each of
    ours (this process, and the launcher or helpers it was told of).
    """
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle = handle() if callable(handle) else handle
        if handle is None:
            first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
            by = pynvml.nvmlDeviceGetHandleByIndex if first.isdigit() else pynvml.nvmlDeviceGetHandleByUUID
            handle = by(int(first) if first.isdigit() else first)
    except pynvml.NVMLError:
        return None
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)  # the newer name, driver 535 on
    reasons = reasons or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def read(fn, *args):
        try:
            return fn(handle, *args)
        except pynvml.NVMLError:  # an unsupported query costs its field, not the trial
            return None

    def sample() -> tuple:
        listed = read(pynvml.nvmlDeviceGetComputeRunningProcesses)
        pids = None if listed is None else {p.pid for p in listed}
        others = None if pids is None else len(pids - ignore) if pids & ignore else max(0, len(pids) - len(ignore))
        return others, read(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM), read(reasons)

    return sample


def verdict(evidence: dict, cv: float | None, target_ci_reached: bool | None, noisy_cv: float = NOISY_CV):
    """(measurement, reasons): contended when interference was seen, else noisy when the spread is
    above target (`target_ci_reached` False, or None for a fixed run count and cv > noisy_cv), else ok.
    Evidence recorded before a field existed is judged on the fields it has."""
    e, cores = evidence, evidence.get("interference_cores") or 1
    contended, noisy = [], []
    others, load = e.get("interference_others_cores"), e.get("interference_load")
    if others is not None and others > OTHERS_CORES_SHARE * cores:
        contended.append(f"others used {min(others, cores):.1f} of {cores} cores")
    waited = e.get("interference_cpu_waited")
    if e.get("interference_device") == "cpu" and waited is not None and waited > CPU_WAITED_MAX:
        contended.append(f"threads waited for a core {waited:.0%} of the time they wanted one")
    no_stat = others is None and e.get("interference_window_s") is None  # not a window too short to judge
    if no_stat and load is not None and load > LOAD_PER_CORE * cores:
        contended.append(f"load {load:.1f} on {cores} cores")
    procs = e.get("interference_gpu_procs")
    if procs is not None and procs > GPU_PROCS_MAX:
        contended.append(f"{procs} other process{'es' if procs > 1 else ''} on the GPU")
    held = sorted(set((e.get("interference_throttle") or "").split(",")) & THROTTLE_CONTENDED)
    if held:
        contended.append(f"GPU clocks held down: {','.join(held)}")
    if target_ci_reached is False:
        noisy.append("CI target not met" + (f" (cv {cv:.1%})" if cv is not None else ""))
    elif target_ci_reached is None and cv is not None and cv > noisy_cv:
        noisy.append(f"cv {cv:.1%} above {noisy_cv:.0%}")
    measurement = CONTENDED if contended else NOISY if noisy else OK
    return measurement, contended + noisy


def record_fields(evidence: dict, cv: float | None, target_ci_reached: bool | None, noisy_cv: float = NOISY_CV):
    """The evidence plus `measurement` and `measurement_reasons`, ready for the result record."""
    measurement, reasons = verdict(evidence, cv, target_ci_reached, noisy_cv)
    return {**evidence, "measurement": measurement, "measurement_reasons": "; ".join(reasons)}
