"""Which code generates: this project's decode loop, or transformers' own generate() as a peer; for
request workloads, our request server, or transformers' continuous batching.

All are built once per trial and called once per run with the same interface (`wrap_step`,
`ranges`) and return the same Generation (a Served for requests), so the trial's measurement, the
record and the token checksum treat a peer exactly like one of our variants. `make_generator` picks
one; an engine is one small module here, declared in tokengen.contract.declarations (`impl` for a
batch, `server` for requests).
"""

from __future__ import annotations

from typing import Callable

import torch

from tokengen.contract.declarations import load
from tokengen.contract.rules import serving_problem
from tokengen.contract.spec import SpecError, TrialSpec
from tokengen.decode.loop import Generation
from tokengen.knobs import around_steps


def make_generator(model: torch.nn.Module, spec: TrialSpec) -> Callable[..., Generation]:
    """The trial's generator: a request server when the spec has requests, else the engine's batch."""
    problem = serving_problem(spec)
    if problem:
        raise SpecError(problem)
    build = load("engine", spec.engine, "server" if spec.requests > 0 else "impl")
    return around_steps(build(model, spec), spec)  # the step-acting knobs' contexts around every call
