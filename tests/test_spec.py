import dataclasses

import pytest

from tokengen.contract.variants import VARIANTS, label_for
from tokengen.contract.spec import KNOBS, SpecError, TrialSpec
from tokengen.contract.rules import resolve


def test_key_is_stable_and_ignores_the_label():
    a = TrialSpec(model="tiny", batch_size=2)
    assert a.key() == TrialSpec(model="tiny", batch_size=2).key()
    assert a.key() == dataclasses.replace(a, variant="custom").key()
    assert a.key() != dataclasses.replace(a, batch_size=3).key()
    # pinned: the key must not change between machines or releases without a deliberate bump
    assert TrialSpec().key() == "1fe8239d5f7330ee"


def test_every_preset_is_a_distinct_knob_setting_and_labels_back():
    settings = [tuple(sorted(p.items())) for p in VARIANTS.values()]
    assert len(set(settings)) == len(settings)
    for name, knobs in VARIANTS.items():
        assert set(knobs) == set(KNOBS)
        assert label_for(knobs) == name


def test_resolve_applies_the_preset_then_explicit_fields_and_relabels():
    spec = resolve("static_compiled", model="tiny")
    assert (spec.cache, spec.compile, spec.variant) == ("static", "default", "static_compiled")
    spec = resolve("static_compiled", compile="off")
    assert spec.variant == "static_cache"
    spec = resolve(None, cache="dynamic", stop_check="none")
    assert spec.variant == "kv_cache_nocheck"
    assert resolve(None, cache="static", stop_check="none", compile="off", allocator="default").variant == "static_cache_nocheck"


def test_resolve_rejects_unknown_names():
    with pytest.raises(SpecError, match="unknown variant 'turbo'"):
        resolve("turbo")
    with pytest.raises(SpecError, match="unknown trial field"):
        resolve(None, batchsize=3)
