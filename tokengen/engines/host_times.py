"""When the host holds each forward's tokens: the request server's clock, read at its stop check's cadence.

Every step of the server is enqueued; the host learns what a step made only when its stop check waits for the
device (sync: after every step; every_k: after every K-th; pipelined and deferred: one step behind, the declared
`reads_behind`), and at the end of each segment, when it reads the slots' finished mask. A forward's tokens are
held from the first such wait that covers it. So a request's first token is held at the first wait after its
admission step, and the gaps between its tokens' held times (its inter-token latencies) follow the check's cadence:
one step apart under sync, one step apart but a step late under a lagged check, and under every_k, K tokens at once
(gaps of 0) then one gap of K steps. On a CPU each step has run when the host enqueued it, so a wait costs nothing,
but the tokens are still said held only where the check looks.

The stop check sees this object as its profiling ranges (RelayRanges: every range is passed on), so it numbers the
run's forwards across segments and times every wait the check makes without touching the check's code.
"""

from __future__ import annotations

import time

from tokengen.decode.ranges import NoRanges, RelayRanges


class HostTimes(RelayRanges):
    """One run's forwards on the host clock, in seconds after `origin`: `entered_s[f]` (the host began forward f)
    and `held_s[f]` (the host holds its tokens), f counting the run's forwards, segment after segment."""

    def __init__(self, inner: NoRanges, reads_behind: int, origin: float):
        super().__init__(inner)
        self.reads_behind, self.origin = reads_behind, origin
        self.offset = 0  # the forwards run before this segment: a stop check numbers its steps from 0
        self.current = 0  # the segment's step the check is in
        self.entered_s: list[float] = []
        self.held_s: list[float] = []
        self._waits: list[tuple[int, float]] = []  # (the last forward it covers, when it returned)

    def step(self, i: int):
        self.current = i
        return self.inner.step(self.offset + i)

    def check(self):
        return _Wait(self)

    def enter(self) -> None:
        self.entered_s.append(time.perf_counter() - self.origin)

    def end_segment(self, forwards: int) -> None:
        """The host has read the finished mask (a full wait): every forward of the segment is held by now, each
        from the first wait that covered it."""
        now = time.perf_counter() - self.origin
        waits, j = self._waits, 0
        for f in range(len(self.held_s), forwards):
            while j < len(waits) and waits[j][0] < f:
                j += 1
            self.held_s.append(waits[j][1] if j < len(waits) else now)
        self._waits = []
        self.offset = forwards


class _Wait:
    """The stop check's wait: the inner range around it, and when it returned, as the forwards it covers."""

    def __init__(self, times: HostTimes):
        self.times = times
        self.inner = times.inner.check()

    def __enter__(self):
        return self.inner.__enter__()

    def __exit__(self, *exc):
        out = self.inner.__exit__(*exc)
        times = self.times
        times._waits.append((times.offset + times.current - times.reads_behind, time.perf_counter() - times.origin))
        return out
