"""Profiling a trial: a window of steps and the profiler around it (nsys around the process:
tokengen.measure.profiler.nsys).

The decode loop's named ranges (tokengen.decode.ranges) mark steps; the profiler opens at the
window's first step and closes after its last. The profiled run is an extra run after the timed
ones, so profiling never touches a timing.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch

from tokengen.contract.forms import parse_window
from tokengen.contract.names import TORCH_TRACE
from tokengen.decode.ranges import NO_RANGES, NvtxRanges, RelayRanges, TorchRanges


def resolve_mode(profile: str, device: str) -> str:
    """`auto` becomes nsys where nsys is on the PATH and the trial is on CUDA, else torch."""
    if profile != "auto":
        return profile
    return "nsys" if device == "cuda" and shutil.which("nsys") else "torch"


def nvtx_available() -> bool:
    """torch's NVTX ranges work on CUDA builds only (a CPU build raises at the first range)."""
    return hasattr(torch._C, "_nvtx")


def shutdown_compile_workers() -> None:
    """Inductor's compile workers outlive the compile until the interpreter's exit, and nsys waits for every
    process the trial started: the profiled run is the trial's last, so they go now."""
    async_compile = sys.modules.get("torch._inductor.async_compile")
    if async_compile is not None:
        async_compile.shutdown_compile_workers()


def clip_window(window: str, max_steps: int) -> tuple[int, int]:
    """The window inside the run: the article's 30-50 becomes the last 20 steps of a shorter run."""
    start, stop = parse_window(window)
    if stop > max_steps:
        start, stop = max(0, max_steps - (stop - start)), max_steps
    return start, stop


class _WindowedRanges(RelayRanges):
    """The profiler's ranges, opening and closing the window just outside the step's range."""

    def __init__(self, inner, run: "ProfiledRun"):
        super().__init__(inner)
        self.run = run

    def step(self, i: int):
        if i == self.run.start:
            self.run.begin()
        elif i == self.run.stop:
            self.run.end()
        return self.inner.step(i)


class ProfiledRun:
    """Starts the profiler at the window's first step and stops it after its last.

    torch: a torch.profiler session exported as a Chrome/Perfetto trace. nsys on CUDA: cudaProfilerStart
    and Stop, which `nsys profile --capture-range=cudaProfilerApi` (wrapped around the process by
    tokengen.measure.profiler.nsys) turns into the capture range; on the CPU nsys captures the whole
    process, and the window is what its NVTX ranges mark (a CPU build of torch has none).
    """

    def __init__(self, mode: str, device: str, window: str, max_steps: int, trace_path: Path):
        self.mode, self.device = mode, device
        self.start, self.stop = clip_window(window, max_steps)
        self.trace_path = trace_path
        inner = TorchRanges() if mode != "nsys" else NvtxRanges() if nvtx_available() else NO_RANGES
        self.ranges = _WindowedRanges(inner, self)
        self.session = None
        self.active = False
        self.opened = False

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def begin(self) -> None:
        self._sync()
        if self.mode == "nsys":
            if self.device == "cuda":
                torch.cuda.profiler.start()
        else:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.device == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.session = torch.profiler.profile(activities=activities)
            self.session.__enter__()
        self.active = self.opened = True

    def end(self) -> None:
        if not self.active:
            return
        self._sync()
        if self.mode == "nsys":
            if self.device == "cuda":
                torch.cuda.profiler.stop()
        else:
            self.session.__exit__(None, None, None)
            self.session.export_chrome_trace(str(self.trace_path))
        self.active = False


def profile_run(generate, spec, out_dir: Path) -> dict:
    """One extra run with the profiler over the window; torch traces are reduced to metrics here,
    nsys reports after the process exits (see tokengen.cli)."""
    skipped = getattr(generate, "PROFILE_SKIPPED", None)
    if skipped:  # an engine whose steps the ranges cannot see: the record says why, not "window none"
        return {"profile_window": None, "profile_skipped": skipped}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / TORCH_TRACE).unlink(missing_ok=True)  # never read an earlier run's trace
    run = ProfiledRun(spec.profile, spec.device, spec.profile_steps, spec.max_seqlen, out_dir / TORCH_TRACE)
    try:
        generate(ranges=run.ranges)
    finally:
        run.end()  # the run may end inside the window (early stop)
        if spec.profile == "nsys":
            shutdown_compile_workers()
    if not run.opened:  # the batch ended before the window's first step
        return {
            "profile_window": "none",
            "gpu_idle_us_per_step": None,
            "gpu_busy_pct": None,
            "host_sync_us_per_step": None,
            "profiled_steps": 0,
        }
    if spec.profile != "torch":
        return {"profile_window": f"{run.start}-{run.stop}"}
    from tokengen.measure.profiler.traces import derive, from_torch_trace

    return {
        **derive(from_torch_trace(run.trace_path)),
        "profile_window": f"{run.start}-{run.stop}",
        "profile_trace": TORCH_TRACE,
    }
