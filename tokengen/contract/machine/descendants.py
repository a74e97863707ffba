"""A process's descendants, found through /proc and ended by their PIDs.

A process group or a session is not enough to end what a trial started: Nsight Systems' agent
(`nsys --start-agent`) forks twice and calls setsid, so it leaves the trial's session at once and
its parent exits; killing the session leaves it running, and one whose profile failed can spin on a core
for minutes. A process that asks to be a child subreaper inherits such orphans as its children, so they
stay its descendants, findable by their parent PIDs and ended one by one. Stdlib only: the sweep's
launcher (sweeps/execution/process_guard.py) and `python -m tokengen` under nsys both use it.
"""

from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper(on: bool = True) -> bool:
    """Orphans among this process's descendants are re-parented to it, not to init (`on=False`: no longer);
    False where Linux refuses (another OS), and descendants that leave are then not found."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parents(zombies: bool) -> dict[int, int]:
    """Every process's parent, read from /proc/PID/stat (the command may hold spaces and parentheses); a zombie
    (dead, not yet reaped by its parent) only with `zombies`."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields and (zombies or fields[0] != "Z"):
            parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int, zombies: bool = False) -> list[int]:
    """The descendants of `pid` (the dead ones not yet reaped only with `zombies`), parents before their children."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents(zombies).items():
        children.setdefault(parent, []).append(child)
    found, queue = [], list(children.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(children.get(child, []))
    return found


def command(pid: int) -> list[str]:
    """A process's argv, or [] where it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def end(pids: list[int], sig: int = signal.SIGKILL) -> None:
    """Signal each PID, and reap those that are this process's own children (orphans it inherited, zombies
    included)."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue
    if sig == signal.SIGKILL:
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:  # not ours to reap: its parent does
                pass


def end_descendants(pid: int | None = None) -> list[int]:
    """Kill every descendant of `pid` (this process by default) by its PID; the PIDs it found."""
    found = descendants(os.getpid() if pid is None else pid)
    end(found)
    return found
