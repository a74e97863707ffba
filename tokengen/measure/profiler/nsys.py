"""A trial under Nsight Systems: `python -m tokengen` run again under `nsys profile`, bounded, and nothing
of nsys left running after it.

On CUDA the capture is the profile window (cudaProfilerStart/Stop, opened by the profiled run); on the
CPU, which never calls them, it is the whole trial process (OS runtime calls, and NVTX ranges where
torch's NVTX works, on CUDA builds). CPU sampling and context-switch tracing stay off: with either on,
nsys 2022.4's agent, on this project's Linux 6.18 machines, spins on a core on the perf events'
EPOLLHUP once the sampled process exits and never ends the profile (docs/results.md). Whatever nsys still
waits for is bounded: once the trial's process is gone nsys gets FINISH_S to write its stream, then it is
ended. Its agent double-forks and calls setsid, leaving the trial's session at once, so the process that
runs nsys becomes a child subreaper: the agent stays its descendant and is ended by its PID
(tokengen.contract.machine.descendants), on every way out, a signal included.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tokengen.contract.machine.descendants import become_subreaper, command, descendants, end
from tokengen.contract.names import NSYS_REP_FILE, NSYS_REPORT, NSYS_STREAM_FILE, NSYS_SUMMARIES, RESULT_FILE

UNDER_NSYS = "TOKENGEN_UNDER_NSYS"
CUDA_TRACE = "cuda,nvtx,osrt"
CPU_TRACE = "osrt,nvtx"
NO_SAMPLING = ["--sample=none", "--cpuctxsw=none"]  # see the module's docstring: with them nsys never ends here
FINISH_S = 60.0  # after the trial's process is gone: nsys writing its stream (a compiled CPU trial's: ~10 s)
START_S = 120.0  # nsys starting the trial's process
POLL_S = 0.5
NSYS_TMP = "nsys-tmp"  # nsys's TMPDIR, in the profile's folder: its session files, a stream cut short


def nsys_command(nsys: str, argv: list[str], output: Path, device: str) -> list[str]:
    """CUDA: the article's capture, only what happens between cudaProfilerStart and Stop. CPU: the whole process."""
    common = [nsys, "profile", *NO_SAMPLING, "--force-overwrite=true", f"--output={output}"]
    if device != "cuda":
        return [*common, f"--trace={CPU_TRACE}", *argv]
    return [
        *common,
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        f"--trace={CUDA_TRACE}",
        "--cuda-graph-trace=node",  # each kernel of a CUDA graph, not one box
        *argv,
    ]


class Stopped(Exception):
    """A signal asked this process to end while nsys ran."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum, frame):
    raise Stopped(signum)


def restoring_tmpdir() -> list[str]:
    """The trial's own TMPDIR back (nsys gets NSYS_TMP), so its temporary files and inductor's default cache
    are where they would be without nsys."""
    return ["env", f"TMPDIR={os.environ['TMPDIR']}"] if "TMPDIR" in os.environ else ["env", "-u", "TMPDIR"]


def run_profiler(command_line: list[str], inner: list[str], tmp: Path) -> tuple[int, str | None]:
    """Run nsys (`command_line`, profiling `inner`) to its end or its bound: (its exit status, a note where it
    was ended). Every process it left is ended by its PID on the way out, a SIGTERM or SIGHUP (Stopped) too."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    before = set(descendants(os.getpid(), zombies=True))
    subreaper = become_subreaper()
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    proc = subprocess.Popen(command_line, env={**os.environ, UNDER_NSYS: "1", "TMPDIR": str(tmp)}, stdout=sys.stderr)
    try:
        return _wait(proc, inner)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        end([pid for pid in descendants(os.getpid(), zombies=True) if pid not in before])
        if subreaper:
            become_subreaper(False)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        shutil.rmtree(tmp, ignore_errors=True)


def _wait(proc: subprocess.Popen, inner: list[str]) -> tuple[int, str | None]:
    """nsys's status; past the bound, nsys is asked to stop (SIGINT), then ended, and the note says so."""
    started, seen, gone = time.monotonic(), False, None
    while (status := proc.poll()) is None:
        time.sleep(POLL_S)
        running = any(command(pid) == inner for pid in descendants(os.getpid()))
        seen |= running
        if seen and not running and gone is None:
            gone = time.monotonic()
        late = (gone is not None and time.monotonic() - gone > FINISH_S) or (
            not seen and time.monotonic() - started > START_S
        )
        if late:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
            what = f"{FINISH_S:g} s after the trial's process ended" if seen else f"{START_S:g} s without the trial"
            return proc.poll() or -signal.SIGINT, f"nsys had not ended {what}: it was ended"
    if gone is not None:  # the log says what nsys cost past the trial (its stream written)
        print(f"nsys: ended {time.monotonic() - gone:.1f} s after the trial's process", file=sys.stderr, flush=True)
    return status, None


def run_under_nsys(argv: list[str], profile_dir: Path, json_path: str | None, device: str) -> int:
    """Run this same command again under `nsys profile`, convert and summarize its report, and fold its figures
    into the record. 0 where the trial left its record (a note says what nsys could not give), else nonzero."""
    from tokengen.measure.profiler.nsys_report import convert, kernel_figures, summarize
    from tokengen.measure.profiler.traces import derive, from_nsys_sqlite

    profile_dir.mkdir(parents=True, exist_ok=True)
    profile_dir = profile_dir.resolve()  # nsys's agent leaves the working directory: its TMPDIR must not be relative
    record_path = Path(json_path) if json_path and json_path != "-" else profile_dir / RESULT_FILE
    inner = [sys.executable, "-m", "tokengen", *strip_option(argv, "--json"), "--json", str(record_path)]
    sqlite_path = profile_dir / f"{NSYS_REPORT}.sqlite"
    for name in (NSYS_REP_FILE, NSYS_STREAM_FILE, sqlite_path.name, *NSYS_SUMMARIES.values()):
        (profile_dir / name).unlink(missing_ok=True)  # never read an earlier run's
    record_path.unlink(missing_ok=True)
    nsys = shutil.which("nsys") or "nsys"
    launched = nsys_command(nsys, restoring_tmpdir() + inner, profile_dir / NSYS_REPORT, device)
    try:  # nsys and the inner trial print to stderr: stdout stays the JSON's alone with --json -
        status, ended = run_profiler(launched, inner, profile_dir / NSYS_TMP)
    except Stopped as stop:
        print(f"stopped by {stop}: nsys and what it started were ended", file=sys.stderr)
        return 128 + stop.signum
    if not record_path.is_file():
        return status or 1
    record = json.loads(record_path.read_text())
    started = time.monotonic()
    note = convert(profile_dir, nsys)
    rep = profile_dir / NSYS_REP_FILE
    if rep.is_file():  # none when the batch ended before a CUDA capture window, or nsys was ended
        subprocess.run(
            [nsys, "export", "--type=sqlite", "--force-overwrite=true", f"--output={sqlite_path}", str(rep)],
            check=True,
            capture_output=True,
        )
        derived = derive(from_nsys_sqlite(sqlite_path)).items()  # on the CPU: no GPU figures, steps only with NVTX
        figures = {k: v for k, v in derived if v is not None and (v or k != "profiled_steps")}
        summaries = summarize(rep, nsys, device)
        steps = figures.get("profiled_steps") or record.get("profiled_steps")
        record.update(figures, **kernel_figures(profile_dir / NSYS_SUMMARIES["kernels"], steps))
        record.update(profile_report=rep.name, profile_summaries=",".join(summaries) or None)
        print(f"nsys: report converted and summarized in {time.monotonic() - started:.1f} s", file=sys.stderr)
    note = note or ended or (f"nsys exited with status {status}" if status else None)
    if note:
        record["profile_note"] = note
    record_path.write_text(json.dumps(record, indent=2))
    if json_path == "-":
        print(json.dumps(record))
    return 0


def nsys_shortfall(status: int | None, record: dict | None, profile_dir: Path) -> str | None:
    """Why a trial run under nsys has no nsys profile, so torch.profiler runs instead; None where it has a report,
    keeps its stream for a later conversion (its record's note says how), or its batch ended before the window
    (which no profiler could change). `status` is run_under_nsys's, None where nsys is not on the PATH."""
    if status is None:
        return "nsys is not on this host's PATH"
    if status != 0:
        return f"the trial under nsys exited with status {status}"
    if record and (record.get("profile_report") or record.get("profile_window") == "none"):
        return None
    if (profile_dir / NSYS_STREAM_FILE).is_file():
        return None
    left = sorted(p.name for p in profile_dir.glob(f"{NSYS_REPORT}*") if p.suffix != ".json")
    why = (record or {}).get("profile_note") or "nsys wrote no report"
    return why + (f" (only {', '.join(left)})" if left else "")


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
