"""When the host learns that every sequence has ended: loops with one signature.

tokengen.contract.declarations names each stop check's loop (here, or a module of its own such as
tokengen.decode.every_k). Each takes `step(i)`, which enqueues decode step i on the current stream,
`all_finished()`, which returns a device bool scalar for the steps enqueued so far, `max_steps`, the
profiling `ranges` (no-ops unless profiling) and, by keyword, `device` (unused by the checks that
only call `.item()`), so one harness drives them all; each returns the number of steps whose tokens
count. A lagged check (pipelined, deferred) has already enqueued step i when it learns that step i-1
ended the batch: it returns i, and step i's token is dropped.

The lagged checks take the streams, events and pinned flags they are built from through `device`
(CUDA by default), so tests/tokengen/test_stop_checks.py can run them on a simulated GPU that falls behind
the host: their bookkeeping is tested on any machine, without a GPU.
"""

from __future__ import annotations

from typing import Callable

import torch

from tokengen.decode.ranges import NO_RANGES, NoRanges

Step = Callable[[int], None]
AllFinished = Callable[[], torch.Tensor]


def sync_check(
    step: Step, all_finished: AllFinished, max_steps: int, ranges: NoRanges = NO_RANGES, *, device=None
) -> int:
    """The article's check: the host blocks on `.item()` every step, so the GPU idles meanwhile."""
    for i in range(max_steps):
        with ranges.step(i):
            step(i)
            with ranges.check():
                if all_finished().item():
                    return i + 1
    return max_steps


def no_check(
    step: Step, all_finished: AllFinished, max_steps: int, ranges: NoRanges = NO_RANGES, *, device=None
) -> int:
    """The upper bound: never asks, always runs max_steps."""
    for i in range(max_steps):
        with ranges.step(i):
            step(i)
    return max_steps


class CudaPrimitives:
    """What a lagged check needs from the device, in one place: a simulated device replaces it in tests."""

    def host_flag(self) -> torch.Tensor:
        return torch.zeros((), dtype=torch.bool, pin_memory=True)  # pinned, so the copy can be non-blocking

    def event(self) -> torch.cuda.Event:
        return torch.cuda.Event()

    def stream(self) -> torch.cuda.Stream:
        return torch.cuda.Stream()

    def current_stream(self) -> torch.cuda.Stream:
        return torch.cuda.current_stream()

    def use(self, stream: torch.cuda.Stream):
        return torch.cuda.stream(stream)


CUDA = CudaPrimitives()


class _PinnedFlags:
    """Host flags with an event each: step i writes slot i % slots. Two slots suffice: a flag is
    read one step after it is posted, before its slot is posted again."""

    def __init__(self, device: CudaPrimitives, slots: int = 2):
        self.flags = [device.host_flag() for _ in range(slots)]
        self.events = [device.event() for _ in range(slots)]

    def post(self, i: int, finished: torch.Tensor) -> None:
        slot = i % len(self.flags)
        self.flags[slot].copy_(finished, non_blocking=True)
        self.events[slot].record()

    def read(self, i: int) -> bool:
        # The host must wait for the copy itself: a stream wait (the article's wait_stream) orders
        # GPU work but lets the host read the flag before it lands.
        slot = i % len(self.flags)
        self.events[slot].synchronize()
        return bool(self.flags[slot].item())


def deferred_check(
    step: Step,
    all_finished: AllFinished,
    max_steps: int,
    ranges: NoRanges = NO_RANGES,
    *,
    device: CudaPrimitives = CUDA,
) -> int:
    """One stream: enqueue step i, then wait for step i-1's flag while the GPU runs step i."""
    flags = _PinnedFlags(device)
    for i in range(max_steps):
        with ranges.step(i):
            step(i)
            flags.post(i, all_finished())
            with ranges.check():
                if i > 0 and flags.read(i - 1):
                    return i
    return max_steps


def pipelined_check(
    step: Step,
    all_finished: AllFinished,
    max_steps: int,
    ranges: NoRanges = NO_RANGES,
    *,
    device: CudaPrimitives = CUDA,
) -> int:
    """The article's ping-pong: steps alternate between two streams, each waiting on the other."""
    origin = device.current_stream()
    streams = [device.stream(), device.stream()]
    for stream in streams:
        stream.wait_stream(origin)  # the prompt and cache reset were enqueued on origin
    flags = _PinnedFlags(device)
    steps = max_steps
    for i in range(max_steps):
        current, previous = streams[i % 2], streams[(i + 1) % 2]
        with ranges.step(i):
            with device.use(current):
                current.wait_stream(previous)
                step(i)
                flags.post(i, all_finished())
            with ranges.check():
                if i > 0 and flags.read(i - 1):
                    steps = i
                    break
    for stream in streams:
        origin.wait_stream(stream)  # whoever reads the tokens next reads them on origin
    return steps
