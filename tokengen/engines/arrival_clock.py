"""The open-loop side of a request server: requests that arrive on the host clock, whatever the server is doing.

An arrival thread sleeps until each request's scheduled time (tokengen/contract/arrivals.py, from the run's
start), registers it (its time on the host clock) and wakes the server if it waits. The server admits only
registered requests, so none is admitted before its arrival, and arrivals never wait for completions: a busy
server finds them registered at its next step boundary, and the wait from arrival to prefill is the request's
queueing delay. A thread keeps the registration honest while the server runs a forward: while arrivals run,
Python's switch interval is SWITCH_S (5 ms by default: a thread that wakes while the server holds the GIL would
wait that long for it), so the arrival error (registered minus scheduled) is the clock's own lateness alone
(benchmarks/arrivals.py measures it). The thread sleeps between arrivals, so the server pays nothing for it. Where
every core is busy (the server on one, other processes on the rest), Linux's scheduler lets a running task finish its
slice (about 3 ms) before a woken one runs; the thread asks for a slice of SLICE_NS (sched_setattr's sched_runtime, a
fair task's own slice since Linux 6.12, no privilege needed), so it runs on waking. Where the kernel or the platform
cannot (an older kernel, another system), it runs as any thread does.

Nothing spins: the thread sleeps until each arrival (re-sleeping the remainder should it wake early), and a
server with nothing to do waits on a condition the thread signals. Offline (every request at the start) no
thread runs: all are registered at 0.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
import time

SWITCH_S = 1e-4
"""Python's switch interval while arrivals run: the longest a woken arrival thread waits for the GIL."""
SLICE_NS = 100_000
"""The arrival thread's scheduler slice: the least Linux takes (0.1 ms)."""
SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}  # the system call's number on Linux, by machine


class _SchedAttr(ctypes.Structure):
    _fields_ = [  # struct sched_attr, its first version (48 bytes)
        ("size", ctypes.c_uint32),
        ("policy", ctypes.c_uint32),  # SCHED_OTHER: 0
        ("flags", ctypes.c_uint64),
        ("nice", ctypes.c_int32),
        ("priority", ctypes.c_uint32),
        ("runtime", ctypes.c_uint64),  # a fair task's slice, in ns
        ("deadline", ctypes.c_uint64),
        ("period", ctypes.c_uint64),
    ]


def short_slice() -> bool:
    """The calling thread asks Linux for a scheduler slice of SLICE_NS; whether it was granted."""
    number = SCHED_SETATTR.get(platform.machine()) if sys.platform == "linux" else None
    if number is None:
        return False
    try:
        attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), policy=0, nice=os.nice(0), runtime=SLICE_NS)
        return ctypes.CDLL(None, use_errno=True).syscall(number, 0, ctypes.byref(attr), 0) == 0
    except (OSError, AttributeError):
        return False


class ArrivalClock:
    """One run's arrivals: `arrived` requests registered so far (in schedule order), each one's `registered_s`
    after the run's origin."""

    def __init__(self, times_s: tuple[float, ...] | None, count: int):
        self.times_s = times_s
        self.count = count
        self.registered_s: list[float] = []
        self.arrived = 0
        self._changed = threading.Condition()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._switch: float | None = None

    def start(self, origin: float) -> None:
        """Arrivals from `origin` (time.perf_counter()); offline, every request is registered at once."""
        self.registered_s, self.arrived = [], 0
        self._stopped.clear()
        if self.times_s is None:
            self.registered_s, self.arrived = [0.0] * self.count, self.count
            return
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(SWITCH_S, self._switch))
        self._thread = threading.Thread(target=self._arrive, args=(origin,), name="arrivals", daemon=True)
        self._thread.start()

    def _arrive(self, origin: float) -> None:
        short_slice()
        for scheduled in self.times_s:
            due = origin + scheduled
            while (now := time.perf_counter()) < due:  # time.sleep may wake a little early on some clocks
                if self._stopped.wait(due - now):
                    return
            with self._changed:
                self.registered_s.append(now - origin)
                self.arrived += 1
                self._changed.notify_all()

    def wait_beyond(self, admitted: int) -> None:
        """Sleep until more than `admitted` requests have arrived (the server has nothing else to do)."""
        with self._changed:
            self._changed.wait_for(lambda: self.arrived > admitted)

    def stop(self) -> None:
        """Every request is served, or the run was abandoned: the thread ends (it has registered all in the first case)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            sys.setswitchinterval(self._switch)
