"""How a generation advances: what one step of the stop check's loop enqueues, behind one interface.

The batch loop (tokengen/decode/loop.py) and the request server (tokengen/engines/request_server.py) hand their stop
check a step that calls their advance once. The advance comes from the trial's declarations (`advance_for`): a LOOP
knob declared with `advances=True` (tokengen/contract/declarations.py) names an advance's factory in each value's
`impl`, called with the spec; at its plain value, or where no such knob is declared, the advance is `OneToken`: one
forward, one token per row. A new way to advance is then its module and one declaration.

An advance moves a `Lane` on: one generation's rows (the batch's, or the server's slots). A lane runs the one-token
forward (`forward(i)`: the prefill, or an admission, where the lane starts rows; one position per row after), samples
(`sample`), keeps one token per row (`keep`), and lends what a longer forward needs: its cache and its decode model
(`cache`, `model`: compiled where the trial compiles). The batch loop's lane (tokengen/decode/rows.py) also appends a
run of a different length to each row (`append`, the stop rule applied token by token) and keeps each row's length.

A speculative advance (k tokens proposed per row, verified in one forward of k + 1 positions) implements the same
four methods: `start` (a generation's counters and proposer state), `__call__(i)` (advance 0 as OneToken: the
prefill's token; after it, propose (R, k) from the lane's tokens, run the row's last token and its proposals through
`lane.model` and `lane.cache` in one forward, sample the k + 1 targets, `lane.append` each row's accepted prefix and
the target after it, and roll the cache back past the rejected positions), `columns(steps)` (the generated columns
that count once `steps` advances count: the longest row's length) and `counts()` (forwards, proposed, accepted). The
server's lane keeps one token per slot, so such a value declares `not_with_requests` (and `needs_cache`,
`greedy_only` or `max_batch` where its verify needs them: tokengen/contract/fact_rules.py refuses the rest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from tokengen.contract.declarations import LOOP, knobs_where, load, plain
from tokengen.contract.spec import SpecError, TrialSpec


@dataclass(frozen=True)
class AdvanceCounts:
    """What a generation's advances did, read once it ends (a speculative advance counts on the device)."""

    forwards: int = 0  # the model's forwards run by the advances (a draft model's own not included)
    proposed: int = 0  # tokens proposed for a verify forward
    accepted: int = 0  # proposed tokens the verify forward kept
    verifies: int = 0  # forwards that verified proposals (several positions at once)
    proposer_s: float = 0.0  # seconds spent proposing (draft forwards, n-gram search)

    def figures(self, row_tokens: float, seconds: float) -> dict:
        """The record's figures of a generation whose advances proposed ({} for one that never did): tokens
        accepted per verify forward, acceptance, the model's forwards per token of a row (1.0 for one token per
        forward), the proposer's share of the run's `seconds`."""
        if not (self.verifies or self.proposer_s):
            return {}
        return {
            "accepted_per_verify": self.accepted / self.verifies if self.verifies else None,
            "acceptance_rate": self.accepted / self.proposed if self.proposed else None,
            "forwards_per_token": self.forwards / row_tokens if row_tokens else None,
            "proposer_share": self.proposer_s / seconds if seconds else None,
        }


class Lane(Protocol):
    """What an advance moves on: one generation's rows (the batch's rows, or the server's slots)."""

    rows: int
    cache: object  # the lane's KV cache (tokengen/decode/caches.py, tokengen/engines/slot_cache.py)
    model: torch.nn.Module  # the decode model, compiled where the trial compiles
    sample: Callable[[torch.Tensor], torch.Tensor]  # logits (R, V) -> ids (R,)

    def forward(self, i: int) -> torch.Tensor:
        """Advance i's one-token forward: logits (R, V) of each row's next token."""
        ...

    def keep(self, new: torch.Tensor, i: int) -> None:
        """One token per row (R,) as advance i's: the stop rule applied, ended rows marked."""
        ...


class Advance(Protocol):
    """How a generation advances; built once per trial, started once per generation, called once per step."""

    def start(self, lane: Lane) -> None: ...

    def __call__(self, i: int) -> None: ...

    def columns(self, steps: int) -> int: ...

    def counts(self) -> AdvanceCounts: ...


class OneToken:
    """The default advance: one forward, one sampled token per row, so `steps` advances make `steps` columns."""

    def __init__(self, spec: TrialSpec | None = None):
        self.lane: Lane | None = None
        self.forwards = 0

    def start(self, lane: Lane) -> None:
        self.lane, self.forwards = lane, 0

    def __call__(self, i: int) -> None:
        lane = self.lane
        lane.keep(lane.sample(lane.forward(i)), i)
        self.forwards += 1

    def columns(self, steps: int) -> int:
        return steps

    def counts(self) -> AdvanceCounts:
        return AdvanceCounts(forwards=self.forwards)


def generate_arguments(model: torch.nn.Module, spec: TrialSpec) -> tuple[dict, dict]:
    """What transformers' generate() is given to advance as the trial's advancing value does (its own speculation,
    the value's peer): (GenerationConfig fields, call arguments), from the value's factory; ({}, {}) at the plain
    value. A value whose factory has no such counterpart is refused in one line."""
    for knob in knobs_where(acts=LOOP, advances=True):
        make = load(knob, getattr(spec, knob))
        if make is not None:
            if not hasattr(make, "generate_arguments"):
                engine = plain("engine").name
                raise SpecError(f"{knob}={getattr(spec, knob)} has no generate() counterpart: use engine={engine}")
            return make.generate_arguments(model, spec)
    return {}, {}


def advance_for(spec: TrialSpec) -> Advance:
    """The trial's advance: made by the first advancing knob's value that names one, else OneToken."""
    for knob in knobs_where(acts=LOOP, advances=True):
        make = load(knob, getattr(spec, knob))
        if make is not None:
            return make(spec)
    return OneToken(spec)
