"""One trial in a process of its own: how the sweep starts it, and what comes back.

A crash, an OOM or a hang kills the trial's process, never the sweep. The process is a fork of a
warm parent: a forkserver (the standard library's) started once per Ray worker with `PRELOAD`
imported (torch, transformers and the model code; CUDA untouched, so a fork may start CUDA afresh:
tokengen/measure/model_imports.py), so a trial starts in milliseconds instead of seconds of imports. A worker
whose first trial compiles also imports torch.compile's own modules there (tokengen/measure/compiler_imports.py),
a second off every compiled trial.

The protocol, typed once: the driver side passes a `TrialRequest` (the spec as data) to the fork;
the child becomes what a fresh process would be (its own session, so a timeout kills all it
started; its own log on fds 1 and 2; the environment the sweep decided), runs the trial, and
writes its outcome from its own handler as one file in the trial's folder: the record
(`result.json`) or a failure (`failure.json`: error type, message, traceback). The log is for
people. A child that leaves neither file was killed (a signal, the timeout) or crashed. The launcher
reads that file back as a `TrialRecord` (`complete_record`, the door: a field of the wrong type fails
there), which is what the Ray task returns. The child
never outlives the process that launched it: a watchdog thread ends its whole session when that
process is gone (its driver died, or Ray ended its task) or when its timeout has passed.

This module imports no torch: the Ray task (sweeps/execution/task.py) that calls it stays light; the child's
imports are the warm parent's.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from sweeps.execution.compile_share import SHARED_IN, SHARED_OUT, offer, receive, settle
from sweeps.execution.process_guard import kill_session, run_at_normal_priority, watchdog
from sweeps.execution.space import free_bytes, full_line, out_of_space
from sweeps.execution.trial_files import clear, open_new, read_file, read_text, trial_folder, write_file
from tokengen.contract.fidelity import DEFAULT_GATE, GATE_ENV
from tokengen.contract.graphs import compiles
from tokengen.contract.machine.process_env import trial_environment
from tokengen.contract.names import (
    ARTIFACT_FILES,
    DEADLINE_ENV,
    FAILED,
    FAILURE_FILE,
    OUT_OF_SPACE,
    RESULT_FILE,
    TOKENS_FILE,
    TRIAL_LOG,
)
from tokengen.contract.record import first_line
from tokengen.contract.slo import SLO_ENV, Slo
from tokengen.contract.spec import SPEC_FIELDS
from tokengen.contract.trial_record import TrialRecord

PRELOAD = [
    "tokengen.measure.trial",
    "tokengen.measure.model_imports",  # transformers' models, imported without starting CUDA
    "sweeps.execution.trial_process",
]
COMPILER_PRELOAD = "tokengen.measure.compiler_imports"  # where the worker's first trial compiles
LOG_TAIL_LINES = 40
PID_FILE = "trial.pid"  # the trial process's pid, in its folder: who to look for after a crash
INDUCTOR = "inductor"  # the trial's own compile cache, in its folder (where no shared one is given)
WATCHDOG_GRACE_S = 5.0  # past its timeout, the launcher kills the trial first; the watchdog is the backstop
LOG_KEPT_CHARS = 200_000

_context = None


@dataclass(frozen=True)
class TrialRequest:
    """Everything a trial process needs, as data alone."""

    spec: dict  # TrialSpec's fields
    key: str
    folder: str  # the trial's own folder: its outcome, tokens, traces and log
    timeout_s: float
    threads: int | None = None  # torch threads (a CPU trial's share of its node)
    inductor_dir: str | None = None  # a shared compile cache, else one inside the folder
    fidelity_gate: float = DEFAULT_GATE  # the sweep's gate, for a gated trial's own verdict
    slo: Slo = Slo()  # the sweep's SLO, for a request trial's goodput and verdict
    shared_from: str | None = None  # the key of the trial whose compiled graphs this one is handed (SHARED_IN)
    share: bool = False  # offer its own compiled graphs to its twins (sweep.inductor_cache=shared)

    @property
    def path(self) -> Path:
        return Path(self.folder)


def failure(error_type: str, message: str, log: str = "", trace: str | None = None) -> dict:
    """A failed trial's record fields."""
    return {
        "status": FAILED,
        "error_type": error_type,
        "error_message": message[:2000],
        "log_tail": "\n".join((trace or log).splitlines()[-LOG_TAIL_LINES:]),
    }


def run_trial_process(request: TrialRequest, handed: bytes | None = None) -> TrialRecord:
    """Run the trial in a fork of the warm parent; its record, or a failure record, with its files, log and any
    compiled graphs it offers. Raises only where its outcome file holds a field of the wrong type. `handed`: the
    compiled graphs of a twin (sweeps/execution/compile_share.py), unpacked by the trial before it builds."""
    folder = trial_folder(request.path)  # the user's own, never a link (FolderRefused)
    stale = (RESULT_FILE, FAILURE_FILE, TRIAL_LOG, PID_FILE, SHARED_IN, SHARED_OUT, *ARTIFACT_FILES)
    clear(folder, stale, None if request.inductor_dir else INDUCTOR)  # an earlier cache would make a cold compile warm
    if handed:
        write_file(folder / SHARED_IN, handed)
    inductor = request.inductor_dir or str(trial_folder(folder / INDUCTOR))
    env = trial_environment(os.environ, request.spec["allocator"], inductor, request.threads)
    env[DEADLINE_ENV] = f"{time.time() + request.timeout_s:.3f}"
    env[GATE_ENV] = repr(float(request.fidelity_gate))
    env[SLO_ENV] = request.slo.to_env()
    started = time.perf_counter()
    process = warm_context(compiles(request.spec)).Process(
        target=_child, args=(request, env, os.getpid()), daemon=False
    )
    process.start()
    process.join(request.timeout_s)
    timed_out = process.exitcode is None
    if timed_out:
        kill_session(process)
    log = read_text(folder / TRIAL_LOG) or ""
    outcome = _full(request, log) or _outcome(request, process.exitcode, timed_out, log)
    record = complete_record(outcome, request.spec, request.key, child_wall_s=time.perf_counter() - started)
    files = {name: read_file(folder / name) for name in ARTIFACT_FILES}
    return dataclasses.replace(
        record,
        files={name: data for name, data in files.items() if data is not None},
        log=log[-LOG_KEPT_CHARS:],
        compile_offer=read_file(folder / SHARED_OUT),  # for the driver's shelf, not the journal
    )


def _outcome(request: TrialRequest, exitcode: int | None, timed_out: bool, log: str) -> dict:
    folder = request.path
    if timed_out:
        return failure("Timeout", f"the trial passed its {request.timeout_s:g} s timeout and was killed", log)
    if exitcode == 0 and (result := read_file(folder / RESULT_FILE)) is not None:
        return json.loads(result)
    if (failed := read_file(folder / FAILURE_FILE)) is not None:
        return json.loads(failed)
    if exitcode is not None and exitcode < 0:
        return failure("Crashed", f"the trial process died of {signal.Signals(-exitcode).name}", log)
    return failure("Failed", f"the trial process exited with status {exitcode} and left no outcome", log)


LOW_SPACE = 256 * 1024  # below this, a trial that left no outcome (or said ENOSPC) is taken to have hit a full disk


def _full(request: TrialRequest, log: str) -> dict | None:
    """An OUT_OF_SPACE failure where the trial's folder is on a full disk and the trial could not leave its
    outcome, or said so: the line names the folder and what a trial there needs (tokens, log, record), so
    the sweep stops (exit 3) instead of failing every trial after it."""
    folder = request.path
    failed, result = read_text(folder / FAILURE_FILE), read_file(folder / RESULT_FILE)
    said = failed is not None and OUT_OF_SPACE in failed
    free = free_bytes(folder)
    if not said and (result is not None or failed is not None or free is None or free >= LOW_SPACE):
        return None
    spec = request.spec
    tokens = 8 * spec.get("batch_size", 1) * (spec.get("prompt_len", 1) + spec.get("max_seqlen", 1))
    return failure(
        OUT_OF_SPACE, full_line("the trial's folder", folder, tokens + LOW_SPACE, "No space left on device"), log
    )


RESOLVED_BY_TRIAL = ("profile",)  # `auto` becomes the profiler the trial's own host could run


def complete_record(outcome: dict, spec: dict, key: str, **result) -> TrialRecord:
    """The one place a trial's outcome (its result.json or failure.json, or a failure the sweep made for it) becomes
    its record: the spec as the sweep planned it, except what only the trial's host could settle
    (RESOLVED_BY_TRIAL), the sweep's key (a GPU-pinned trial's differs from its spec's), and `result`'s fields (the
    pinned type, where it ran). A field of the wrong type, or one nobody declares, fails here in one line."""
    settled = {name: outcome[name] for name in RESOLVED_BY_TRIAL if outcome.get(name) is not None}
    measured = {name: value for name, value in outcome.items() if name not in SPEC_FIELDS}
    return TrialRecord.from_dict(
        {
            **spec,
            **settled,
            **measured,
            "key": key,
            "env_host": outcome.get("env_host") or socket.gethostname(),
            **result,
        }
    )


def warm_context(compiler: bool = False):
    """The forkserver, started by the worker's first trial: with torch.compile's imports where that one compiles
    (its preload is fixed once it runs; an eager sweep's workers never pay for them)."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD + [COMPILER_PRELOAD] * compiler)
    return _context


def _child(request: TrialRequest, env: dict[str, str], launcher: int) -> None:
    """The trial process: exits 0 with result.json written, 1 with failure.json written."""
    os.setsid()
    run_at_normal_priority()
    folder = request.path
    write_file(folder / PID_FILE, str(os.getpid()))
    deadline = time.monotonic() + request.timeout_s + WATCHDOG_GRACE_S
    threading.Thread(target=watchdog, args=(launcher, deadline), daemon=True).start()
    log = open_new(folder / TRIAL_LOG)  # never through a link: a planted one would be overwritten in its target
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(env)  # read lazily by torch: the allocator at CUDA start, inductor at compile
    try:
        record = _run(request)
        _write(folder / RESULT_FILE, record)
        status = 0
    except BaseException as exc:  # noqa: BLE001 - every failure leaves its outcome file
        traceback.print_exc()
        _write(folder / FAILURE_FILE, failure(_error_type(exc), first_line(exc, 2000), trace=traceback.format_exc()))
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _run(request: TrialRequest) -> dict:
    import torch

    from tokengen.contract.rules import resolve
    from tokengen.measure.profiler.nsys import UNDER_NSYS, nsys_shortfall, run_under_nsys
    from tokengen.measure.profiler.window import resolve_mode
    from tokengen.measure.trial import run_trial

    if request.threads:
        torch.set_num_threads(request.threads)
    spec = resolve(**request.spec)
    spec = dataclasses.replace(spec, profile=resolve_mode(spec.profile, spec.device))
    folder = request.path
    note = None
    if spec.profile == "nsys" and os.environ.get(UNDER_NSYS) != "1":
        status = (
            run_under_nsys(cli_arguments(spec.to_dict(), folder), folder, str(folder / RESULT_FILE), spec.device)
            if shutil.which("nsys")
            else None
        )
        record = json.loads(read_file(folder / RESULT_FILE) or "null") if status == 0 else None
        note = nsys_shortfall(status, record, folder)
        if note is None:
            return record
        print(f"{note}: profiled by torch.profiler instead", flush=True)
        spec = dataclasses.replace(spec, profile="torch")
    cache = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or folder / INDUCTOR)
    received = receive(folder, cache, spec.device)  # a twin's compiled graphs, before anything is built
    record = settle(run_trial(spec, str(folder / TOKENS_FILE), str(folder)), received, request.shared_from)
    if request.share:
        offer(folder, cache, record, spec.device)
    if note:
        record["profile_note"] = f"{note}: profiled by torch.profiler instead"
    from tokengen.terminal_table import render

    print(render(record))  # the log is for people: the table `python -m tokengen` prints
    return record


def cli_arguments(spec: dict, folder: Path) -> list[str]:
    """`python -m tokengen` arguments for this spec, for the re-run nsys wraps around a process."""
    argv = ["--tokens", str(folder / TOKENS_FILE), "--profile-dir", str(folder)]
    for name, value in spec.items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    return argv


def _error_type(exc: BaseException) -> str:
    from tokengen.contract.spec import SpecError

    name = type(exc).__name__
    if isinstance(exc, SpecError):
        return "SpecError"
    if out_of_space(exc):
        return OUT_OF_SPACE
    return "OutOfMemory" if "OutOfMemory" in name else name


def _write(path: Path, record: dict) -> None:
    write_file(path, json.dumps(record, indent=2, default=str))
