"""The presets are declared facts (tokengen/contract/declarations.py `PRESETS`), their names the declared words
(tokengen/contract/variants.py): a value joins every family its facts fit, named like its neighbours, with no line
written anywhere but its declaration. The names users type are held in tests/tokengen/test_declarations.py.
"""

from __future__ import annotations

from tokengen.contract import declarations
from tokengen.contract.declarations import COMPILED, PRESETS, Declared
from tokengen.contract.variants import VARIANTS, _family


def _presets() -> dict:
    return dict(preset for family in PRESETS for preset in _family(family))


def test_the_declared_families_make_the_presets():
    assert _presets() == VARIANTS and list(_presets()) == list(VARIANTS)


def test_a_new_compile_mode_joins_the_families_its_facts_fit(monkeypatch):
    turbo = Declared("compile", "turbo", None, family=COMPILED, preset="turbo", doc="a compile mode for the test")
    monkeypatch.setattr(declarations, "DECLARED", (*declarations.DECLARED, turbo))
    made = {name: knobs for name, knobs in _presets().items() if knobs["compile"] == "turbo"}
    assert {"static_turbo", "static_turbo_every_k", "static_turbo_continuous", "hf_generate_turbo"} <= set(made)
    assert all(knobs["cache"] == "static" for knobs in made.values())  # fixed shapes only: what a compiled step keeps
    assert set(_presets()) - set(made) == set(VARIANTS)  # every other preset as it was


def test_a_value_that_requires_others_brings_them_into_its_presets(monkeypatch):
    """generate() declared to need a fixed-shape cache: its families keep the requirement, so only its presets on
    that cache remain, and a peer's name leaves unsaid what its engine requires (as hf_generate_batch's does)."""
    table = tuple(
        Declared(**{**d.__dict__, "requires": (("cache", "static"),)})
        if (d.knob, d.name) == ("engine", "generate")
        else d
        for d in declarations.DECLARED
    )
    monkeypatch.setattr(declarations, "DECLARED", table)
    made = {name: knobs["cache"] for name, knobs in _presets().items() if knobs["engine"] == "generate"}
    assert made == dict.fromkeys(
        ["hf_generate", "hf_generate_compiled", "hf_generate_cudagraph", "hf_generate_autotuned"], "static"
    )
