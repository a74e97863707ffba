"""Request workloads: N prompted requests served by batch_size slots, batch after batch or continuously.

With `requests = N > 0` a trial serves N requests (request i: row i of the trial's seeded prompts,
its length drawn from `stop` as row i of `target_lengths(stop, N, ...)`) with S = batch_size slots.
One loop serves both knobs; only the rule that admits waiting requests differs:

- `static`: S requests at a time; the next S are admitted once every slot has ended (a batch runs
  until its longest request ends, as the batch loop does).
- `continuous`: a slot whose request has ended takes the next waiting request at once (its prefill
  in the step that moves the other slots on), until all N are served.

Every step is one forward over all S slots and per-slot KV buffers (tokengen.engines.slot_cache): a decode
step (S, 1), whose shapes are fixed so torch.compile and CUDA graphs apply, or an admission step
(S, P) that prefills any number of admitted requests in the forward that moves every other slot on.

Each step calls the trial's advance (tokengen/decode/advance.py) on the run's slots (`_SlotLane`): one token
per slot per forward, the admission's included.

The host never schedules from the lengths it drew: the stop policy forces EOS on the device (as
tokengen.decode.stopping.StopPolicy does) and marks the slot finished there, and the host learns of it only
through the trial's stop check, which it runs until some slot holds a request that has ended unseen;
then it reads the slots' finished mask, answers those requests and admits as its rule says. A lagged
check (pipelined, deferred) has by then run one step more: every slot's state is consistent after
it (a live slot has its next token; an ended slot writes only to a spare row), so nothing needs to
be dropped. The server counts its steps itself: the forwards run, admission steps included.

Requests arrive as the trial's arrival fields say (tokengen/contract/arrivals.py): offline, every request is queued
when the run starts; at a `request_rate` or from a `request_trace`, open loop, on the host clock
(tokengen/engines/arrival_clock.py): a request is admitted only once it has arrived, in arrival order; a server
with no request in hand sleeps until the next one arrives, and a continuous server with a free slot ends its
segment at the first step boundary after an arrival (the arrival flag joins the stop check's condition, so it is
learned at the check's cadence, as an end is). Static batching admits what has arrived, up to S, once every slot
is free. Under a trace each request reads its own prompt length (the admission step prefills each slot's own) and
ends at its own output length.

A request's `latencies_s` runs from the run's start to when the host learns that it ended; the run also keeps each
request's arrival, registration and admitting forward, and when the host began each forward and held its tokens
(tokengen/engines/host_times.py): tokengen/measure/load_figures.py makes each request's latencies from them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from tokengen.contract.arrivals import schedule_for
from tokengen.contract.declarations import declared, load
from tokengen.contract.forms import parse_stop
from tokengen.contract.spec import TrialSpec
from tokengen.decode.advance import advance_for
from tokengen.decode.loop import Generation, compile_model
from tokengen.decode.prompts import prompt_ids
from tokengen.decode.ranges import NO_RANGES, NoRanges
from tokengen.decode.sampling import make_sampler
from tokengen.decode.stopping import row_lengths, target_lengths
from tokengen.engines.arrival_clock import ArrivalClock
from tokengen.engines.host_times import HostTimes
from tokengen.engines.slot_cache import SlotKV
from tokengen.measure.clocks import percentile
from tokengen.models import eos_ids


@dataclass
class Served(Generation):
    """A request workload's run: tokens (N, P + max_seqlen) in request order, each request's tokens
    then EOS padding; `steps` = forwards run (admissions included), each over `slots` slots."""

    latencies_s: list[float] = field(default_factory=list)  # (N,) run start -> the host learns it ended
    slots: int = 1
    # the run's clock, in seconds after its start (tokengen/engines/arrival_clock.py, host_times.py)
    arrivals_s: list[float] = field(default_factory=list)  # (N,) each request's scheduled arrival (offline: 0)
    registered_s: list[float] = field(default_factory=list)  # (N,) when the server registered it
    admitted_at: list[int] = field(default_factory=list)  # (N,) the forward that admitted it (its prefill)
    entered_s: list[float] = field(default_factory=list)  # (F,) when the host began each forward
    held_s: list[float] = field(default_factory=list)  # (F,) when the host held each forward's tokens
    token_times_s: list[list[float]] = field(default_factory=list)  # (N, its tokens): a peer's own clock per token

    def __post_init__(self) -> None:
        if self.produced is None:  # slot-steps: every slot makes a token per forward, idle or padding included
            self.produced = self.slots * self.steps


def request_lengths(spec: TrialSpec, tokens: torch.Tensor, eos: list[int]) -> torch.Tensor:
    """(N,) generated tokens of each request up to its end, EOS included (tokengen.decode.stopping.row_lengths; a
    trace's output lengths)."""
    schedule = schedule_for(spec)
    if schedule is not None and schedule.output_lens is not None:
        return torch.tensor(schedule.output_lens)
    return row_lengths(spec.stop, spec.seed, spec.max_seqlen, spec.prompt_len, tokens, eos, spec.max_seqlen)


def serving_figures(runs: list[Served], useful: int) -> dict:
    """The record's request figures: latency percentiles (each the median over the timed runs) and
    the share of slot-steps that produced a useful token (the last run's)."""
    last = runs[-1]
    return {
        "request_latency_p50_s": statistics.median(percentile(r.latencies_s, 50) for r in runs),
        "request_latency_p90_s": statistics.median(percentile(r.latencies_s, 90) for r in runs),
        "slot_occupancy": useful / last.produced if last.produced else None,
    }


@dataclass
class _Slots:
    """One run's device state, slot by slot; row N of `tokens` is a spare that ended slots write to."""

    request: torch.Tensor  # (S,) the request a slot serves (N: none)
    generated: torch.Tensor  # (S,) tokens that request holds so far
    last: torch.Tensor  # (S,) the token fed at the next decode step
    finished: torch.Tensor  # (S,) bool: its request has ended, or it holds none
    unseen: torch.Tensor  # (S,) bool: it holds a request whose end the host has not yet learned
    tokens: torch.Tensor  # (N + 1, P + max_seqlen)


class _SlotLane:
    """One run's slots as the advance moves them on (tokengen/decode/advance.py's Lane): a step's forward is an
    admission where the host has admitted requests (`admitting`), else a decode step; a kept token goes to the
    request its slot serves."""

    def __init__(self, server: "RequestServer", state: _Slots, sample, ranges: NoRanges):
        self.server, self.state, self.sample, self.ranges = server, state, sample, ranges
        self.rows, self.cache, self.model = server.slots, server.cache, server.model
        self.admitting: tuple[list[int], list[int]] | None = None  # (slots, requests) the next step admits

    def forward(self, i: int) -> torch.Tensor:
        with self.ranges.forward():
            if self.admitting:  # the segment's first step
                admitting, self.admitting = self.admitting, None
                return self.server._admit(self.state, *admitting)
            return self.server._decode(self.state)

    def keep(self, new: torch.Tensor, i: int) -> None:
        self.server._keep(self.state, new)


class RequestServer:
    """Built once per trial (compiled decode, per-slot KV buffers, prompts, lengths), called once per run.

    A step is one forward for every slot: a decode step (S, 1), or, first in a segment after the host
    admitted requests, an admission step (S, P) that prefills the admitted slots and moves every other
    slot on by one token (tokengen.engines.slot_cache). The admission step runs eagerly (its shape is not
    decode's, as the batch loop's prefill); only decode runs on the compiled model.
    """

    def __init__(self, model: torch.nn.Module, spec: TrialSpec):
        self.spec, self.eager = spec, model
        self.device = next(model.parameters()).device
        self.model = compile_model(model, spec.compile)
        self.graphed = declared("compile", spec.compile).cuda_graphs
        self.slots, self.count, self.prompt_len = spec.batch_size, spec.requests, spec.prompt_len
        # positions 0 .. P + max_seqlen - 2: the last token is never fed back
        self.cache = SlotKV(model, self.slots, spec.prompt_len, spec.prompt_len + spec.max_seqlen - 1)
        self.stop_check = load("stop_check", spec.stop_check)
        self.advance = advance_for(spec)
        prompts = prompt_ids(
            model.config, self.count, spec.prompt_len, spec.seed, self.device, spec.max_seqlen
        )  # (N, P)
        self.prompts = torch.cat([prompts, prompts[:1]])  # (N + 1, P): row N stands in for "no request"
        self.kind, _ = parse_stop(spec.stop)
        self.eos = torch.tensor(eos_ids(model.config) or [-1], device=self.device)
        self.pad = (eos_ids(model.config) or [-1])[0]  # a host copy: reading eos[0] back would wait for the device
        self.pinned = self.device.type == "cuda"
        self.reads_behind = declared("stop_check", spec.stop_check).reads_behind
        schedule = schedule_for(spec)
        self.clock = ArrivalClock(schedule and schedule.times_s, self.count)
        self.arrivals = list(schedule.times_s) if schedule else [0.0] * self.count
        self.prompt_lens = None
        targets = target_lengths(spec.stop, self.count, spec.max_seqlen, spec.seed)
        if schedule is not None and schedule.output_lens is not None:  # a trace: its lengths end its requests
            self.kind, targets = "trace", torch.tensor(schedule.output_lens)
            lengths = torch.tensor([*schedule.prompt_lens, spec.prompt_len])  # (N + 1,)
            beyond = torch.arange(spec.prompt_len)[None, :] >= lengths[:, None]  # (N + 1, P): past its own prompt
            self.prompts = self.prompts.masked_fill(beyond.to(self.device), self.pad)
            self.prompt_lens = lengths.to(self.device)
        if targets is not None:  # (N + 1,): the spare row ends at once
            self.targets = torch.cat([targets, torch.ones(1, dtype=torch.long)]).to(self.device)

    def _end(self, new: torch.Tensor, request: torch.Tensor, generated: torch.Tensor):
        """The tokens to keep (S,) and which requests they end (S,), as StopPolicy decides on the device:
        a drawn length says EOS at its last token; stop=model ends at an EOS; max_seqlen ends any."""
        if self.kind == "model":
            ended = torch.isin(new, self.eos)
        elif self.kind == "never":
            ended = torch.zeros_like(new, dtype=torch.bool)
        else:
            ended = self.targets[request] <= generated + 1
            new = torch.where(ended, self.eos[0], new)
        return new, ended | (generated + 1 >= self.spec.max_seqlen)

    def _keep(self, state: _Slots, sampled: torch.Tensor) -> None:
        """Every slot's new token (S,): kept in its request's row, ended there by the stop rule; a slot
        past its end writes to the spare row."""
        new, ended = self._end(sampled, state.request, state.generated)  # (S,), (S,)
        row = torch.where(state.finished, self.count, state.request)  # (S,)
        column = self.prompt_len + state.generated.clamp(max=self.spec.max_seqlen - 1)  # (S,)
        state.tokens[row, column] = new
        state.finished |= ended
        state.generated += 1
        state.last.copy_(new)

    def _admit(self, state: _Slots, slots: list[int], requests: list[int]) -> torch.Tensor:
        """The admission step's forward: the requests take the slots (k of S); logits (S, V) for every slot."""
        # built on the host in pinned memory, then one non-blocking copy: the host never waits for the device here
        staged = torch.full((self.slots,), self.count, dtype=torch.long, pin_memory=self.pinned)
        staged[slots] = torch.tensor(requests, dtype=torch.long)
        incoming = staged.to(self.device, non_blocking=True)  # (S,): N where none is admitted
        admitted = incoming < self.count  # (S,)
        state.request.copy_(torch.where(admitted, incoming, state.request))
        state.generated.masked_fill_(admitted, 0)
        state.finished &= ~admitted
        state.unseen |= admitted
        fed = torch.where(admitted[:, None], self.prompts[incoming], state.last[:, None])  # (S, P)
        lengths = None if self.prompt_lens is None else self.prompt_lens[incoming]  # (S,): a trace's prompt lengths
        return self.cache.admit(self.eager, fed, admitted, lengths)

    def _decode(self, state: _Slots) -> torch.Tensor:
        if self.graphed:
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs are dead
        return self.cache.decode(self.model, state.last)  # (S, V)

    def _fresh(self) -> _Slots:
        slots, spec = self.slots, self.spec
        tokens = torch.full((self.count + 1, spec.prompt_len + spec.max_seqlen), self.pad, device=self.device)
        tokens[:, : spec.prompt_len] = self.prompts
        spare = torch.full((slots,), self.count, device=self.device)
        return _Slots(
            request=spare,
            generated=torch.zeros_like(spare),
            last=torch.zeros_like(spare),
            finished=torch.ones(slots, dtype=torch.bool, device=self.device),
            unseen=torch.zeros(slots, dtype=torch.bool, device=self.device),
            tokens=tokens,
        )

    @torch.inference_mode()
    def __call__(self, wrap_step: Callable | None = None, ranges: NoRanges = NO_RANGES) -> Served:
        """Serve every request once; `wrap_step` lets a timer see each step (admissions included)."""
        spec, state = self.spec, self._fresh()
        lane = _SlotLane(self, state, make_sampler(spec.sampling, spec.seed, self.device), ranges)
        self.advance.start(lane)
        held: list[int | None] = [None] * self.slots  # the host's view: the request each slot serves
        ended_at, admitted_at = [0.0] * self.count, [0] * self.count
        queued, forwards = 0, 0

        def step(i: int) -> None:
            nonlocal forwards
            times.enter()
            self.advance(i)
            forwards += 1

        marked = wrap_step(step) if wrap_step else step
        start = time.perf_counter()
        times = HostTimes(ranges, self.reads_behind, start)  # also numbers the segments' steps for a profiler
        clock = self.clock
        clock.start(start)
        free = list(range(self.slots))
        try:
            while True:
                learned = time.perf_counter() - start
                for s in free:
                    if held[s] is not None:
                        ended_at[held[s]], held[s] = learned, None
                waiting = clock.arrived - queued  # arrived, not yet admitted: never one that has not arrived
                take = free[:waiting] if spec.batching == "continuous" or len(free) == self.slots else []
                if take:
                    lane.admitting = (take, list(range(queued, queued + len(take))))
                    queued += len(take)
                    for s, r in zip(*lane.admitting):
                        held[s], admitted_at[r] = r, forwards
                if all(h is None for h in held):
                    if queued == self.count:
                        break
                    clock.wait_beyond(queued)  # nothing in hand: sleep until the next request arrives
                    continue
                # a continuous server with a slot to spare also ends its segment once another request arrives
                watch = spec.batching == "continuous" and len(take) < len(free)

                def ended_or_arrived(watch=watch, queued=queued) -> torch.Tensor:
                    ended = (state.finished & state.unseen).any()
                    return ended | True if watch and clock.arrived > queued else ended

                self.stop_check(marked, ended_or_arrived, spec.max_seqlen + 1, times)
                free = [s for s, done in enumerate(state.finished.tolist()) if done]  # the host reads the mask
                times.end_segment(forwards)
                state.unseen &= ~state.finished
        finally:
            clock.stop()
        return Served(
            tokens=state.tokens[: self.count],
            steps=forwards,
            prompt_len=spec.prompt_len,
            latencies_s=ended_at,
            slots=self.slots,
            counts=self.advance.counts(),
            arrivals_s=list(self.arrivals),
            registered_s=list(clock.registered_s),
            admitted_at=admitted_at,
            entered_s=times.entered_s,
            held_s=times.held_s,
        )
