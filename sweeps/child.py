"""Run one trial in its own process, so a crash, an OOM or a hang kills the trial, never the sweep.

Plain functions, no Ray and no torch: the Ray task (sweeps/task.py) is a thin wrapper around
`run_child`. The process is a fork of a warm parent (sweeps/launcher.py) running the same code as
`python -m tokengen ... --json`; what it leaves in the trial's folder comes back as the record.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from pathlib import Path

from sweeps.launcher import run_forked
from tokengen.names import ARTIFACT_FILES, FAILED, RESULT_FILE, TOKENS_FILE, TRIAL_LOG
from tokengen.process_env import trial_environment

LOG_TAIL_LINES = 40
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Interrupt)\w*): ?(.*)$")


def arguments(spec: dict, json_path: Path, tokens_path: Path) -> list[str]:
    """The CLI arguments of `python -m tokengen` for this spec."""
    argv = ["--json", str(json_path), "--tokens", str(tokens_path), "--profile-dir", str(json_path.parent)]
    for name, value in spec.items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    return argv


def failure(error_type: str, message: str, log: str) -> dict:
    return {
        "status": FAILED,
        "error_type": error_type,
        "error_message": message[:2000],
        "log_tail": "\n".join(log.splitlines()[-LOG_TAIL_LINES:]),
    }


def classify(returncode: int, log: str) -> tuple[str, str]:
    """(error type, message) of a failed child, from its exit and the last exception line it printed."""
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return "Crashed", f"the trial process died of {name}"
    for line in reversed(log.splitlines()):
        match = _ERROR_LINE.match(line.strip())
        if match:
            kind, message = match.groups()
            return ("OutOfMemory" if "OutOfMemory" in kind else kind), message or line.strip()
    spec_errors = [line for line in log.splitlines() if line.startswith("error: ")]
    if returncode == 2 and spec_errors:
        return "SpecError", spec_errors[-1]
    return "Failed", f"the trial process exited with status {returncode}"


def run_child(spec: dict, key: str, sweep_dir: str, timeout_s: float, threads: int | None = None,
              inductor_dir: str | None = None) -> dict:
    """Run one trial for `spec` in its own process; return its record, or a failure record. Never raises.

    Its files go to `sweep_dir/key`: the sweep's own folder, so a trial of another sweep with the same
    key (another user, same grid) never deletes or overwrites them while this one runs."""
    trial_dir = Path(sweep_dir) / key
    trial_dir.mkdir(parents=True, exist_ok=True)
    json_path, tokens_path, log_path = trial_dir / RESULT_FILE, trial_dir / TOKENS_FILE, trial_dir / TRIAL_LOG
    for stale in (json_path, *(trial_dir / name for name in ARTIFACT_FILES)):
        stale.unlink(missing_ok=True)
    inductor = Path(inductor_dir) if inductor_dir else trial_dir / "inductor"
    env = trial_environment(os.environ, spec["allocator"], str(inductor), threads)
    started = time.perf_counter()
    outcome = run_forked(arguments(spec, json_path, tokens_path), env, threads, str(log_path), timeout_s)
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    if outcome.timed_out:
        record = failure("Timeout", f"the trial passed its {timeout_s:g} s timeout and was killed", log)
    elif outcome.returncode == 0 and json_path.is_file():
        record = json.loads(json_path.read_text())
    else:
        record = failure(*classify(outcome.returncode, log), log)
    record["files"] = {name: (trial_dir / name).read_bytes() for name in ARTIFACT_FILES if (trial_dir / name).is_file()}
    record["log"] = log[-200_000:]
    record["child_wall_s"] = time.perf_counter() - started
    record.setdefault("env_host", socket.gethostname())
    return record
