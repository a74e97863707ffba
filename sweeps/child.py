"""Run one trial in its own process, so a crash, an OOM or a hang kills the child, never the sweep.

Plain functions, no Ray: the Ray task in schedule.py is a thin wrapper around `run_child`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tokengen.measure import EXPANDABLE
from tokengen.names import ARTIFACT_FILES, FAILED, RESULT_FILE, TOKENS_FILE, TRIAL_LOG

LOG_TAIL_LINES = 40
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Interrupt)\w*): ?(.*)$")


def command(spec: dict, json_path: Path, tokens_path: Path) -> list[str]:
    argv = [sys.executable, "-m", "tokengen", "--json", str(json_path), "--tokens", str(tokens_path),
            "--profile-dir", str(json_path.parent)]
    for name, value in spec.items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    return argv


def environment(spec: dict, inductor_dir: Path, threads: int | None) -> dict:
    """The child's own environment: allocator, compile cache, thread count, no hub access."""
    env = dict(os.environ)
    env.pop("PYTORCH_ALLOC_CONF", None)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if spec["allocator"] == "expandable":
        env["PYTORCH_ALLOC_CONF"] = EXPANDABLE
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_dir)
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


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


def run_child(spec: dict, key: str, workdir: str, timeout_s: float, threads: int | None = None,
              inductor_dir: str | None = None) -> dict:
    """Run `python -m tokengen` for one spec; return its record, or a failure record. Never raises."""
    trial_dir = Path(workdir) / key
    trial_dir.mkdir(parents=True, exist_ok=True)
    json_path = trial_dir / RESULT_FILE
    tokens_path = trial_dir / TOKENS_FILE
    for stale in (json_path, *(trial_dir / name for name in ARTIFACT_FILES)):
        stale.unlink(missing_ok=True)
    inductor = Path(inductor_dir) if inductor_dir else trial_dir / "inductor"
    env = environment(spec, inductor, threads)
    started = time.perf_counter()
    # its own process group, so a timeout also kills what it started (nsys and the profiled trial)
    proc = subprocess.Popen(command(spec, json_path, tokens_path), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        log = (stdout or "") + (stderr or "")
        record = failure("Timeout", f"the trial passed its {timeout_s:g} s timeout and was killed", log)
        return _finish(record, trial_dir, log, started)
    log, returncode = stdout + stderr, proc.returncode
    if returncode == 0 and json_path.is_file():
        record = json.loads(json_path.read_text())
    else:
        record = failure(*classify(returncode, log), log)
    return _finish(record, trial_dir, log, started)


def _finish(record: dict, trial_dir: Path, log: str, started: float) -> dict:
    """Adds the log and the artifact files' bytes: the driver may be on another node."""
    (trial_dir / TRIAL_LOG).write_text(log)
    record["files"] = {name: (trial_dir / name).read_bytes() for name in ARTIFACT_FILES if (trial_dir / name).is_file()}
    record["log"] = log[-200_000:]
    record["child_wall_s"] = time.perf_counter() - started
    record.setdefault("env_host", socket.gethostname())
    return record
