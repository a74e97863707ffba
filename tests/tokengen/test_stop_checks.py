"""The lagged stop checks' bookkeeping, on the CPU: a simulated GPU that runs behind the host.

A lagged check is correct only because of a few orderings: the host waits on the flag's event
before reading it, each stream waits for the other before its step, the streams wait for the
prompt and the reader waits for the streams, and the extra step's token is dropped. A real GPU
that keeps up hides every one of those bugs. `SimGpu` need not: on its 'lagging' schedule work runs
only when something waits for it, so a flag read too early is still False; on its 'lopsided' one
a stream races ahead of the other, so a step that does not wait for the step before it reads a
token that is not there yet. Each broken check below differs from the real one by one line, and
each must be caught.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from tokengen.contract.declarations import LAGGED, REFERENCE, declared, in_family, load
from tokengen.decode.ranges import NO_RANGES
from tokengen.decode.stop_checks import _PinnedFlags, sync_check

EOS, POISON = -1, -99  # POISON: what a step writes when it reads a token no step has written yet


# --- a GPU that runs behind the host -----------------------------------------------------------


class SimStream:
    """Work in host order; `done` ops of it have run on the simulated GPU."""

    def __init__(self, gpu: "SimGpu"):
        self.gpu, self.ops, self.done = gpu, [], 0

    def enqueue(self, op) -> None:
        self.ops.append(op)
        self.gpu.after_enqueue(self)

    def run_until(self, n: int) -> None:
        while self.done < n:
            self.done += 1
            self.ops[self.done - 1]()

    def wait_stream(self, other: "SimStream") -> None:
        upto = len(other.ops)  # other's work so far, as cudaStreamWaitEvent sees it
        self.enqueue(lambda: other.run_until(upto))


class SimEvent:
    def __init__(self, gpu: "SimGpu"):
        self.gpu, self.mark = gpu, None

    def record(self) -> None:
        stream = self.gpu.current
        self.mark = (stream, len(stream.ops))

    def synchronize(self) -> None:  # the host waits for the stream up to the record
        if self.mark:
            self.mark[0].run_until(self.mark[1])


class DeviceBool:
    """A device scalar: its value exists once the op that computes it has run."""

    def __init__(self, gpu: "SimGpu"):
        self.gpu, self.value, self.stream = gpu, None, gpu.current

    def item(self) -> bool:  # .item() waits for the stream the value is computed on
        self.stream.run_until(len(self.stream.ops))
        return self.value


class HostFlag:
    """Pinned host memory: a non-blocking copy lands when the GPU runs it, not when it is enqueued."""

    def __init__(self, gpu: "SimGpu"):
        self.gpu, self.value = gpu, False

    def copy_(self, source: DeviceBool, non_blocking: bool = False) -> None:
        self.gpu.current.enqueue(lambda: setattr(self, "value", source.value))

    def item(self) -> bool:
        return self.value


class SimGpu:
    """Stands in for stop_checks.CudaPrimitives. `schedule` says when enqueued work runs: 'lagging'
    (only when waited for: the GPU as far behind as it can be), 'eager' (at once: a GPU that keeps
    up), 'lopsided' (the first side stream lags, every other stream runs at once: one stream races
    ahead of the other), or an int seed (a random amount of work after each enqueue)."""

    def __init__(self, schedule):
        self.default = self.current = SimStream(self)
        self.streams = [self.default]
        self.schedule = schedule
        self.rng = random.Random(schedule) if isinstance(schedule, int) else None

    def host_flag(self) -> HostFlag:
        return HostFlag(self)

    def event(self) -> SimEvent:
        return SimEvent(self)

    def stream(self) -> SimStream:
        self.streams.append(SimStream(self))
        return self.streams[-1]

    def current_stream(self) -> SimStream:
        return self.current

    @contextmanager
    def use(self, stream: SimStream):
        outer, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = outer

    def after_enqueue(self, stream: SimStream) -> None:
        lagging_side = len(self.streams) > 1 and stream is self.streams[1]
        if self.schedule == "eager" or (self.schedule == "lopsided" and not lagging_side):
            stream.run_until(len(stream.ops))
        elif self.rng:
            some = self.rng.choice(self.streams)
            some.run_until(min(len(some.ops), some.done + self.rng.randint(0, 2)))


# --- a decode loop whose rows end at their own steps ---------------------------------------------


@dataclass(frozen=True)
class Outcome:
    steps: int  # what the check returned
    tokens: tuple  # columns 0..steps, as the generator slices them, read on the default stream
    enqueued: int  # steps the check enqueued


class SimDecode:
    """Device state of one generation: tokens[i] is column i (column 0 the prompt), written by step
    i-1; row r says EOS from step targets[r]-1 on (its targets[r]-th token), as stop=fixed/uniform do."""

    def __init__(self, gpu: SimGpu, targets: list[int], max_steps: int):
        self.gpu, self.targets, self.max_steps = gpu, targets, max_steps
        self.tokens = [None] * (1 + max_steps)
        self.finished = [False] * len(targets)
        self.enqueued = 0
        prompt = tuple(100 + row for row in range(len(targets)))  # distinct rows
        gpu.default.enqueue(lambda: self.tokens.__setitem__(0, prompt))  # what wait_stream(origin) must see

    def step(self, i: int) -> None:
        assert i < self.max_steps, f"step {i} enqueued past max_steps={self.max_steps}: no column for its token"
        self.enqueued += 1
        self.gpu.current.enqueue(lambda: self._run(i))

    def _run(self, i: int) -> None:
        previous = self.tokens[i]
        column = []
        for row, target in enumerate(self.targets):
            if previous is None:
                column.append(POISON)
            elif self.finished[row]:
                column.append(EOS)
            elif i + 1 == target:
                column.append(EOS)
                self.finished[row] = True
            else:
                column.append(previous[row] * 31 + i + 1)
        self.tokens[i + 1] = tuple(column)

    def all_finished(self) -> DeviceBool:
        flag = DeviceBool(self.gpu)
        self.gpu.current.enqueue(lambda: setattr(flag, "value", all(self.finished)))
        return flag

    def read(self, steps: int) -> Outcome:
        self.gpu.default.run_until(len(self.gpu.default.ops))  # tokens.cpu(): waits for the default stream only
        return Outcome(steps, tuple(self.tokens[: steps + 1]), self.enqueued)


def run(check, targets: list[int], max_steps: int, schedule="lagging") -> Outcome:
    """One generation through the check, on a simulated GPU (every check takes `device=`)."""
    gpu = SimGpu(schedule)
    decode = SimDecode(gpu, targets, max_steps)
    return decode.read(check(decode.step, decode.all_finished, max_steps, NO_RANGES, device=gpu))


# (per-row targets, max_steps): early ends, an end on the last step, the earliest end, no end at all
SCENARIOS = [([3, 7, 5], 10), ([4, 9, 2], 9), ([1, 1, 1], 6), ([20, 30, 25], 8), ([1], 1), ([2, 1], 2)]
ADVERSARIES = ["lagging", "lopsided"]
SCHEDULES = [*ADVERSARIES, "eager", 0, 1, 2]


def problems(check, schedule="lagging", overrun: int = 1) -> list[str]:
    """How the check's results differ from the sync check's, scenario by scenario; `overrun`: the steps
    its declaration says it may enqueue past sync's end (a lagged check learns one step late)."""
    found = []
    for targets, max_steps in SCENARIOS:
        name = f"targets={targets} max_steps={max_steps}"
        want = run(sync_check, targets, max_steps)
        try:
            got = run(check, targets, max_steps, schedule)
        except AssertionError as exc:
            found.append(f"{name}: raised {exc}")
            continue
        if got.steps != want.steps:
            found.append(f"{name}: steps {got.steps}, sync says {want.steps}")
        if got.tokens != want.tokens:
            found.append(f"{name}: tokens differ from sync's")
        extra = min(overrun, max_steps - want.steps)  # never past max_steps
        if not want.steps <= got.enqueued <= want.steps + extra:
            found.append(f"{name}: enqueued {got.enqueued} steps, want {want.steps} to {want.steps + extra}")
    return found


def test_the_simulated_sync_check_stops_at_the_longest_row():
    """The reference itself: the batch ends with its longest row, or at max_steps."""
    for targets, max_steps in SCENARIOS:
        got = run(sync_check, targets, max_steps)
        assert got.steps == min(max(targets), max_steps)
        assert POISON not in sum(got.tokens[1:], ()) and len(set(got.tokens[0])) == len(targets)


CHECKED = [
    name for name in in_family("stop_check", REFERENCE, LAGGED) if declared("stop_check", name).overrun is not None
]
"""Every declared check that ends with the batch (the no-check bound runs every step)."""


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", CHECKED)
def test_every_declared_check_returns_exactly_what_sync_returns(name, schedule):
    assert problems(load("stop_check", name), schedule, declared("stop_check", name).overrun) == []


# --- the broken checks: each one line away from the real one -------------------------------------


class UnwaitedFlags(_PinnedFlags):
    def read(self, i: int) -> bool:
        return bool(self.flags[i % 2].item())  # BUG: no event wait: the copy may not have landed


def deferred_with(bug: str):
    """The real deferred loop with one bug; every line a bug touches names it."""

    def check(step, all_finished, max_steps, ranges=NO_RANGES, *, device):
        late = 2 if bug == "reads the flag a step late" else 1  # step i-2's flag: the end seen a step late
        flags = UnwaitedFlags(device) if bug == "reads the flag without its event" else _PinnedFlags(device, slots=3)
        for i in range(max_steps + (bug == "runs a step past max_steps")):  # to read the last step's flag
            step(i)
            flags.post(i, all_finished())
            if i >= late and flags.read(i - late):
                return {"keeps the extra token": i + 1, "drops a real token": i - 1}.get(bug, i)
        return max_steps

    check.__name__ = f"deferred, {bug}"
    return check


def pipelined_as_the_article_reads_the_flag(step, all_finished, max_steps, ranges=NO_RANGES, *, device):
    """The article's version: the origin stream waits for the step's stream, the host does not."""
    origin = device.current_stream()
    streams = [device.stream(), device.stream()]
    for stream in streams:
        stream.wait_stream(origin)
    flags = UnwaitedFlags(device)
    for i in range(max_steps):
        current, previous = streams[i % 2], streams[(i + 1) % 2]
        with device.use(current):
            current.wait_stream(previous)
            step(i)
            flags.post(i, all_finished())
        origin.wait_stream(previous)  # BUG: orders GPU work; the host reads the flag before it lands
        if i > 0 and flags.read(i - 1):
            return i
    for stream in streams:
        origin.wait_stream(stream)
    return max_steps


def pipelined_with(bug: str):
    """The real pipelined loop less one of its stream waits."""

    def check(step, all_finished, max_steps, ranges=NO_RANGES, *, device):
        origin = device.current_stream()
        streams = [device.stream(), device.stream()]
        for stream in streams:
            if bug != "no wait for the prompt":
                stream.wait_stream(origin)
        flags = _PinnedFlags(device)
        steps = max_steps
        for i in range(max_steps):
            current, previous = streams[i % 2], streams[(i + 1) % 2]
            with device.use(current):
                if bug != "no wait for the previous step":
                    current.wait_stream(previous)
                step(i)
                flags.post(i, all_finished())
            if i > 0 and flags.read(i - 1):
                steps = i
                break
        for stream in streams:
            if bug != "no final wait":
                origin.wait_stream(stream)
        return steps

    check.__name__ = f"pipelined, {bug}"
    return check


BROKEN = [  # (check, what gives it away)
    (deferred_with("reads the flag a step late"), "steps"),
    (deferred_with("keeps the extra token"), "steps"),
    (deferred_with("drops a real token"), "steps"),
    (deferred_with("runs a step past max_steps"), "past max_steps"),
    (deferred_with("reads the flag without its event"), "steps"),
    (pipelined_as_the_article_reads_the_flag, "steps"),
    (pipelined_with("no wait for the previous step"), "tokens differ"),
    (pipelined_with("no wait for the prompt"), "tokens differ"),
    (pipelined_with("no final wait"), "tokens differ"),
]


@pytest.mark.parametrize("check, symptom", BROKEN, ids=[c.__name__ for c, _ in BROKEN])
def test_each_broken_check_is_caught_on_a_gpu_that_lags(check, symptom):
    found = [line for schedule in ADVERSARIES for line in problems(check, schedule)]
    assert any(symptom in line for line in found), found


def test_the_stream_bugs_hide_on_a_gpu_that_keeps_up():
    """Why the lagging GPU is needed: in host order, the missing waits change nothing."""
    for bug in ("no wait for the previous step", "no wait for the prompt", "no final wait"):
        assert problems(pipelined_with(bug), "eager") == []


def test_the_templates_without_a_bug_are_correct():
    """deferred_with and pipelined_with, bug-free, pass: so each broken check fails for its bug alone."""
    for schedule in SCHEDULES:
        assert problems(deferred_with("none"), schedule) == problems(pipelined_with("none"), schedule) == []
