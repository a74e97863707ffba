"""When the host learns that every sequence has ended: four loops with one signature.

Each takes `step(i)`, which enqueues decode step i on the current stream, `all_finished()`, which
returns a device bool scalar for the steps enqueued so far, `max_steps`, and the profiling
`ranges` (no-ops unless profiling); each returns the
number of steps whose tokens count. A lagged check (pipelined, deferred) has already enqueued
step i when it learns that step i-1 ended the batch: it returns i, and step i's token is dropped.
"""

from __future__ import annotations

from typing import Callable

import torch

from tokengen.profiling import NO_RANGES, NoRanges

Step = Callable[[int], None]
AllFinished = Callable[[], torch.Tensor]


def sync_check(step: Step, all_finished: AllFinished, max_steps: int, ranges: NoRanges = NO_RANGES) -> int:
    """The article's check: the host blocks on `.item()` every step, so the GPU idles meanwhile."""
    for i in range(max_steps):
        with ranges.step(i):
            step(i)
            with ranges.check():
                if all_finished().item():
                    return i + 1
    return max_steps


def no_check(step: Step, all_finished: AllFinished, max_steps: int, ranges: NoRanges = NO_RANGES) -> int:
    """The upper bound: never asks, always runs max_steps."""
    for i in range(max_steps):
        with ranges.step(i):
            step(i)
    return max_steps


class _PinnedFlags:
    """Two pinned host flags with an event each: step i writes slot i % 2."""

    def __init__(self):
        self.flags = [torch.zeros((), dtype=torch.bool, pin_memory=True) for _ in range(2)]
        self.events = [torch.cuda.Event() for _ in range(2)]

    def post(self, i: int, finished: torch.Tensor) -> None:
        self.flags[i % 2].copy_(finished, non_blocking=True)
        self.events[i % 2].record()

    def read(self, i: int) -> bool:
        # The host must wait for the copy itself: a stream wait (the article's wait_stream) orders
        # GPU work but lets the host read the flag before it lands.
        self.events[i % 2].synchronize()
        return bool(self.flags[i % 2].item())


def deferred_check(step: Step, all_finished: AllFinished, max_steps: int, ranges: NoRanges = NO_RANGES) -> int:
    """One stream: enqueue step i, then wait for step i-1's flag while the GPU runs step i."""
    flags = _PinnedFlags()
    for i in range(max_steps):
        with ranges.step(i):
            step(i)
            flags.post(i, all_finished())
            with ranges.check():
                if i > 0 and flags.read(i - 1):
                    return i
    return max_steps


def pipelined_check(step: Step, all_finished: AllFinished, max_steps: int, ranges: NoRanges = NO_RANGES) -> int:
    """The article's ping-pong: steps alternate between two streams, each waiting on the other."""
    origin = torch.cuda.current_stream()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for stream in streams:
        stream.wait_stream(origin)
    flags = _PinnedFlags()
    steps = max_steps
    for i in range(max_steps):
        current, previous = streams[i % 2], streams[(i + 1) % 2]
        with ranges.step(i):
            with torch.cuda.stream(current):
                current.wait_stream(previous)
                step(i)
                flags.post(i, all_finished())
            with ranges.check():
                if i > 0 and flags.read(i - 1):
                    steps = i
                    break
    for stream in streams:
        origin.wait_stream(stream)
    return steps


STOP_CHECKS = {"sync": sync_check, "pipelined": pipelined_check, "deferred": deferred_check, "none": no_check}
