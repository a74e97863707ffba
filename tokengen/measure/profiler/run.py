"""Profiling a trial: a window of steps, the profiler around it, and nsys around the process.

The decode loop's named ranges (tokengen.decode.ranges) mark steps; the profiler opens at the
window's first step and closes after its last. The profiled run is an extra run after the timed
ones, so profiling never touches a timing.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import torch

from tokengen.contract.forms import parse_window
from tokengen.contract.names import NSYS_REPORT, RESULT_FILE, TORCH_TRACE
from tokengen.decode.ranges import NvtxRanges, RelayRanges, TorchRanges

NSYS_TRACE = "cuda,nvtx,osrt"


def resolve_mode(profile: str, device: str) -> str:
    """`auto` becomes nsys where nsys is on the PATH and the trial is on CUDA, else torch."""
    if profile != "auto":
        return profile
    return "nsys" if device == "cuda" and shutil.which("nsys") else "torch"


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

    torch: a torch.profiler session exported as a Chrome/Perfetto trace. nsys: cudaProfilerStart
    and Stop, which `nsys profile --capture-range=cudaProfilerApi` (wrapped around the process by
    tokengen.cli, see nsys_command) turns into the capture range.
    """

    def __init__(self, mode: str, device: str, window: str, max_steps: int, trace_path: Path):
        self.mode, self.device = mode, device
        self.start, self.stop = clip_window(window, max_steps)
        self.trace_path = trace_path
        self.ranges = _WindowedRanges(NvtxRanges() if mode == "nsys" else TorchRanges(), self)
        self.session = None
        self.active = False
        self.opened = False

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def begin(self) -> None:
        self._sync()
        if self.mode == "nsys":
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
            torch.cuda.profiler.stop()
        else:
            self.session.__exit__(None, None, None)
            self.session.export_chrome_trace(str(self.trace_path))
        self.active = False


def nsys_command(argv: list[str], output: Path) -> list[str]:
    """The article's capture: only what happens between cudaProfilerStart and Stop is recorded."""
    return [
        "nsys",
        "profile",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        f"--trace={NSYS_TRACE}",
        "--cuda-graph-trace=node",  # each kernel of a CUDA graph, not one box
        "--force-overwrite=true",
        f"--output={output}",
        *argv,
    ]


def nsys_export_command(report: Path, sqlite_path: Path) -> list[str]:
    return ["nsys", "export", "--type=sqlite", "--force-overwrite=true", f"--output={sqlite_path}", str(report)]


UNDER_NSYS = "TOKENGEN_UNDER_NSYS"


def run_under_nsys(argv: list[str], profile_dir: Path, json_path: str | None) -> int:
    """Run this same command again under `nsys profile`, then fold the report's metrics into the record."""
    import subprocess

    from tokengen.measure.profiler.traces import derive, from_nsys_sqlite

    profile_dir.mkdir(parents=True, exist_ok=True)
    record_path = Path(json_path) if json_path and json_path != "-" else profile_dir / RESULT_FILE
    inner = [sys.executable, "-m", "tokengen", *strip_option(argv, "--json"), "--json", str(record_path)]
    report = profile_dir / NSYS_REPORT
    report.with_suffix(".nsys-rep").unlink(missing_ok=True)
    # nsys and the inner trial print to stderr: stdout stays the JSON's alone with --json -
    proc = subprocess.run(nsys_command(inner, report), env={**os.environ, UNDER_NSYS: "1"}, stdout=sys.stderr)
    if proc.returncode != 0:
        return proc.returncode
    record = json.loads(record_path.read_text())
    rep = report.with_suffix(".nsys-rep")
    if rep.is_file():  # no report when the batch ended before the capture window
        sqlite_path = profile_dir / f"{NSYS_REPORT}.sqlite"
        subprocess.run(nsys_export_command(rep, sqlite_path), check=True, capture_output=True)
        record.update(derive(from_nsys_sqlite(sqlite_path)), profile_report=rep.name)
    record_path.write_text(json.dumps(record, indent=2))
    if json_path == "-":
        print(json.dumps(record))
    return 0


def nsys_shortfall(status: int | None, record: dict | None, profile_dir: Path) -> str | None:
    """Why a trial run under nsys has no nsys profile, or None when it has one (or its batch ended before
    the window, which no profiler could change). `status` is run_under_nsys's, None where nsys is not on
    the PATH. Some nsys builds (the one inside Nsight Compute) write a .qdstrm and no report."""
    if status is None:
        return "nsys is not on this host's PATH"
    if status != 0:
        return f"the trial under nsys exited with status {status}"
    if record and (record.get("profile_report") or record.get("profile_window") == "none"):
        return None
    left = sorted(p.name for p in profile_dir.glob(f"{NSYS_REPORT}*"))
    return "nsys wrote no report" + (f" (only {', '.join(left)})" if left else "")


def strip_option(argv: list[str], option: str) -> list[str]:
    """argv without `option VALUE` or `option=VALUE`."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


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
