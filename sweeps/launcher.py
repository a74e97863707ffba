"""Trial processes started from a warm parent: one fresh process per trial without its imports.

A forkserver (the standard library's) is started once per Ray worker with `tokengen.trial_process`
preloaded: torch, transformers and the model code imported, CUDA untouched (nothing at import
time asks CUDA anything, so a fork may start CUDA afresh). Each trial is a fork of it, so crash,
OOM and allocator isolation stay per trial while the import cost is paid once per worker. This
module itself imports no torch: the Ray task that calls it stays light.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from dataclasses import dataclass

PRELOAD = ["tokengen.trial_process", "sweeps.launcher"]

_context = None


def _warm_context():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _child(argv: list[str], env: dict[str, str], threads: int | None, log_path: str) -> None:
    from tokengen.trial_process import run  # already imported in the warm parent

    run(argv, env, threads, log_path)


@dataclass
class Outcome:
    returncode: int | None  # None: killed at its timeout
    timed_out: bool


def run_forked(argv: list[str], env: dict[str, str], threads: int | None, log_path: str,
               timeout_s: float) -> Outcome:
    """Run `python -m tokengen ARGV` as a fork of the warm parent; kill its session at the timeout."""
    process = _warm_context().Process(target=_child, args=(argv, env, threads, log_path), daemon=False)
    process.start()
    process.join(timeout_s)
    if process.exitcode is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the trial and anything it started (nsys, compile workers)
        except ProcessLookupError:  # killed before it made its own session
            process.kill()
        process.join()
        return Outcome(None, True)
    return Outcome(process.exitcode, False)
