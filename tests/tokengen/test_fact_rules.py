"""Every declared fact is a rule for every knob: a value of any knob that declares one is refused where the trial
breaks it, in one line that names the fix, and the fix clears it (tokengen/contract/fact_rules.py).

Each case declares the fact for the test alone, on the knob's value in the breaking trial (its plain one unless the
trial sets it), by putting a changed declaration in the declarations' table for the test's length: no value is
declared so in the project.
"""

from __future__ import annotations

import dataclasses

import pytest

from tokengen.contract import declarations
from tokengen.contract.declarations import KNOBS, plain, values
from tokengen.contract.rules import incompatibility, problem, resolve

WORKLOAD = {"model": "tiny", "device": "cpu", "batch_size": 4, "max_seqlen": 8}


def _runs_alone(knob: str, name: str) -> bool:
    return incompatibility(resolve(None, **WORKLOAD, **{knob: name})) is None


def _another(knob: str) -> tuple[str, str]:
    """(another knob, a value of it away from plain that runs with every other knob plain): what `knob` requires."""
    for other in KNOBS[KNOBS.index(knob) + 1 :] + KNOBS[: KNOBS.index(knob)]:
        for value in values(other)[1:]:
            if _runs_alone(other, value.name):
                return other, value.name
    raise AssertionError(f"no other knob has a value that runs alone beside {knob}")


def _cases(knob: str):
    """fact -> (its declaration, the fields that break it, the fix the reason names, the fields that fix it)."""
    other, wanted = _another(knob)
    return {
        "requires": (
            {"requires": ((other, wanted),)},
            {},
            f"needs {other}={wanted} (got {other}={plain(other).name}): use {other}={wanted}",
            {other: wanted},
        ),
        "greedy_only": ({"greedy_only": True}, {"sampling": "topk:5"}, "use sampling=greedy", {"sampling": "greedy"}),
        "max_batch": ({"max_batch": 1}, {}, "(got batch_size=4): use batch_size=1", {"batch_size": 1}),
        "needs_cache": (
            {"needs_cache": True},
            {"cache": "none"},
            "use cache=dynamic or cache=static",
            {"cache": "static"},
        ),
        "not_with_requests": ({"not_with_requests": True}, {"requests": 4}, "requests=0", {"requests": 0}),
        "requests_only": ({"requests_only": True}, {}, "set requests=N (N > 0)", {"requests": 4}),
        "compiles_fixed_only": (
            {"compiles_fixed_only": True},
            {"cache": "dynamic", "compile": "default"},
            "use cache=static or compile=off",
            {"cache": "static"},
        ),
    }


def _declare(monkeypatch, knob: str, name: str, facts: dict) -> None:
    """`knob`=`name` declared with `facts` for the test's length."""
    value = declarations.declared(knob, name)
    changed = dataclasses.replace(value, **facts)
    table = tuple(changed if d is value else d for d in declarations.DECLARED)
    monkeypatch.setattr(declarations, "DECLARED", table)


FACTS = list(_cases(KNOBS[0]))


@pytest.mark.parametrize("fact", FACTS)
@pytest.mark.parametrize("knob", KNOBS)
def test_a_fact_declared_on_any_knob_refuses_the_trial_that_breaks_it_in_one_line_naming_the_fix(
    knob, fact, monkeypatch
):
    facts, breaking, fix, fixed = _cases(knob)[fact]
    spec = resolve(None, **{**WORKLOAD, **breaking})
    assert incompatibility(spec) is None or not incompatibility(spec).startswith(f"{knob}="), "refused already"
    name = breaking.get(knob, plain(knob).name)
    _declare(monkeypatch, knob, name, facts)
    reason = incompatibility(spec)
    assert reason and "\n" not in reason and reason.startswith(f"{knob}={name} "), reason
    assert fix in reason, reason
    assert problem(spec) == reason  # the CLI and a trial refuse it with the same line
    after = incompatibility(resolve(None, **{**WORKLOAD, **breaking, **fixed}))
    assert after is None or not after.startswith(f"{knob}={name} "), after  # the fix named clears it


def test_the_engines_facts_are_the_peers_refusals():
    """What transformers' engines cannot do is declared on them, and the generic rules say it."""
    generate = resolve("hf_generate", **WORKLOAD)
    assert incompatibility(dataclasses.replace(generate, stop_check="every_k")) == (
        "engine=generate has its own stop check: use stop_check=sync"
    )
    assert incompatibility(dataclasses.replace(generate, requests=4)) == (
        "engine=generate runs one batch: use engine=generate_batch for requests, or requests=0"
    )
    batch = resolve("hf_generate_batch", **WORKLOAD, requests=4)
    assert incompatibility(dataclasses.replace(batch, compile="default")) == (
        "engine=generate_batch has its own batching, paged cache and loop (compile=default): "
        "use variant hf_generate_batch"
    )
    assert incompatibility(dataclasses.replace(batch, requests=0)).startswith("engine=generate_batch serves requests")
