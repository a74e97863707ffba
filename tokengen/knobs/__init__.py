"""Where the knobs that are not the loop's own parts act: on the built model, and around the decode steps.

A knob declares where it acts (tokengen.contract.declarations: MODEL, STEP); its value's implementation is
looked up there. `on_model` applies every model-acting value once, to the built model, before any compile;
`around_steps` wraps a generator so every generation runs inside each step-acting value's context (traced
inside it too, so a compiled step keeps the backend it was compiled with). A knob at its plain value
runs nothing.
"""

from __future__ import annotations

import contextlib

from tokengen.contract.declarations import MODEL, STEP, knobs_where, load
from tokengen.contract.spec import TrialSpec


def on_model(model, spec: TrialSpec):
    """The model with every model-acting value of the trial applied, in declaration order."""
    for knob in knobs_where(acts=MODEL):
        change = load(knob, getattr(spec, knob))
        if change is not None:
            model = change(model)
    return model


def step_contexts(spec: TrialSpec) -> list:
    """The context factories of the trial's step-acting values (none at their plain values)."""
    found = (load(knob, getattr(spec, knob)) for knob in knobs_where(acts=STEP))
    return [context for context in found if context is not None]


class AroundSteps:
    """A generator whose every call runs inside the trial's step contexts; anything else is the generator's."""

    def __init__(self, generator, contexts: list):
        self.generator, self.contexts = generator, contexts

    def __call__(self, *args, **kwargs):
        with contextlib.ExitStack() as stack:
            for context in self.contexts:
                stack.enter_context(context())
            return self.generator(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.generator, name)


def around_steps(generator, spec: TrialSpec):
    """The generator itself where no step-acting value is set, else wrapped by AroundSteps."""
    contexts = step_contexts(spec)
    return AroundSteps(generator, contexts) if contexts else generator
