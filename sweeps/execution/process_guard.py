"""What keeps a trial process in bounds: its session killed whole (compile workers, a profiler, nsys), its priority
back to normal, and a watchdog that ends it once its launcher is gone or its timeout has passed."""

from __future__ import annotations

import os
import signal
import time

from tokengen.contract.machine.descendants import descendants, end

WATCHDOG_PERIOD_S = 0.5


def kill_session(process) -> None:
    """The trial, its session, and its descendants that left the session (nsys's agent calls setsid; the trial
    under nsys is its subreaper, so it stays a descendant: tokengen/measure/profiler/nsys.py), by their PIDs."""
    left = descendants(process.pid)  # before the kill: once the trial is gone its orphans are init's
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the trial and anything it started (nsys, compile workers)
    except ProcessLookupError:  # killed before it made its own session
        process.kill()
    end(left)
    process.join()


def run_at_normal_priority() -> None:
    """Ray starts its workers at nice 15 (RAY_worker_niceness), and a trial forked from one would
    inherit it: any other process on the node, the driver's own report included, would then take
    the CPU from the timed runs, which crawl through the contention and are timed after it, unseen.
    Back to 0 where the process may (root, or CAP_SYS_NICE); sweeps/execution/schedule.py starts a local Ray
    with its workers at 0, and docs/cluster.md says how to start a cluster's nodes so."""
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) > 0:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
    except (OSError, AttributeError):
        pass


def watchdog(launcher: int, deadline: float) -> None:
    """Ends this trial's whole session (compile workers, a profiler, nsys) once the process that
    launched it is gone or the timeout has passed with nobody left to enforce it."""
    while True:
        time.sleep(WATCHDOG_PERIOD_S)
        try:
            os.kill(launcher, 0)
            gone = False
        except ProcessLookupError:
            gone = True
        except PermissionError:  # alive, under another user
            gone = False
        if gone or time.monotonic() > deadline:
            end(descendants(os.getpid()))  # those that left the session too (nsys's agent)
            os.killpg(0, signal.SIGKILL)
