"""`python -m sweeps.execution.reaper DRIVER PID:START ...`: ends the local Ray a driver started once that driver is gone.

A driver killed by SIGKILL runs no handler: the Ray it started (GCS, raylet, the dashboard and runtime-env
agents, idle workers) would go on listening for a minute or more before Ray's own timeouts end it. So a
local Ray's driver starts this small process beside it (in a session of its own, so a signal to the
driver's group spares it): twice a second it notes every process of that Ray and below it, and when the
driver has died it kills all it noted at once. It exits by itself when those
processes are gone (ray.shutdown) or the driver is. Processes are named by pid and start time, so a pid
the system gave to another process since is never touched. Linux /proc only; elsewhere it does nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PERIOD_S = 0.5


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (/proc/PID/stat field 22), None if it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return None if fields[0] in ("Z", "X") else fields[19]


def children_of() -> dict[int, list[int]]:
    """Every process's children, from /proc (one pass)."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            parent = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(parent, []).append(int(name))
    return tree


def descendants(pid: int, tree: dict[int, list[int]] | None = None) -> list[int]:
    tree = children_of() if tree is None else tree
    found, stack = [], list(tree.get(pid, []))
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(tree.get(child, []))
    return found


def watch(pids: list[int]) -> None:
    """Start the reaper for `pids` (this process's Ray), watching this process."""
    if not Path("/proc/self/stat").exists() or not pids:
        return
    named = [f"{pid}:{start_time(pid)}" for pid in pids if start_time(pid)]
    subprocess.Popen(
        [sys.executable, "-m", "sweeps.execution.reaper", f"{os.getpid()}:{start_time(os.getpid())}", *named],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def _same(named: str) -> bool:
    """Whether `pid:start` is still that process (not gone, not a zombie, not a new one with its pid)."""
    pid, started = named.split(":", 1)
    return start_time(int(pid)) == started


def main(driver: str, named: list[str]) -> None:
    """Every period, while the driver lives: the Ray processes and all below them, as `pid:start` (a raylet
    dies with its driver and its agents pass to init, so the tree must be known before the end); once the
    driver is gone, every one of them that is still the same process is killed."""
    known = set(named)
    while True:  # the driver first: its Ray's own processes die with it, their agents do not
        if not _same(driver):
            for entry in known:
                pid = int(entry.split(":", 1)[0])
                if _same(entry):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            return
        if not any(_same(n) for n in named):  # ray.shutdown: nothing left to end
            return
        tree = children_of()
        roots = [int(n.split(":", 1)[0]) for n in named if _same(n)]
        for pid in (d for root in roots for d in descendants(root, tree)):
            started = start_time(pid)
            if started:
                known.add(f"{pid}:{started}")
        time.sleep(PERIOD_S)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
