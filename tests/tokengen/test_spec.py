import dataclasses

import pytest

from tokengen.contract.rules import resolve
from tokengen.contract.spec import KNOBS, SpecError, TrialSpec
from tokengen.contract.variants import VARIANTS, label_for


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
    assert (
        resolve(None, cache="static", stop_check="none", compile="off", allocator="default").variant
        == "static_cache_nocheck"
    )


def test_resolve_rejects_unknown_names():
    with pytest.raises(SpecError, match="unknown variant 'turbo'"):
        resolve("turbo")
    with pytest.raises(SpecError, match="unknown trial field"):
        resolve(None, batchsize=3)


# keys computed before runs=auto existed (commit 001e39f): adding min_runs, max_runs and target_ci must not move them
EARLIER_KEYS = {
    "defaults": ({}, "1fe8239d5f7330ee"),
    "tiny_runs5": (dict(model="tiny", runs=5, prompt_len=8, batch_size=4), "f38284ac35e36b86"),
    "smoke_kv_48_runs5": (
        dict(
            variant="kv_cache",
            model="tiny",
            device="cpu",
            stop="never",
            prompt_len=8,
            warmup=1,
            runs=5,
            batch_size=4,
            max_seqlen=48,
        ),
        "e77439f7d306eb8f",
    ),
    "article_static_compiled": (
        dict(variant="static_compiled", device="cuda", batch_size=32, max_seqlen=200),
        "c6b57b3b82594569",
    ),
    "hf_generate_bf16": (
        dict(variant="hf_generate", model="gpt2", dtype="bfloat16", device="cuda", prompt_len=128, runs=3),
        "fcabd33139cc3709",
    ),
    "serving": (
        dict(variant="static_cache_continuous", device="cuda", requests=64, batch_size=8, stop="lognormal:40,0.6"),
        "194dde77c218b7ce",
    ),
}


@pytest.mark.parametrize("name", EARLIER_KEYS)
def test_keys_hashed_before_runs_auto_are_unchanged(name):
    fields, key = dict(EARLIER_KEYS[name][0]), EARLIER_KEYS[name][1]
    assert resolve(fields.pop("variant", None), **fields).key() == key


def test_runs_auto_is_runs_zero_in_every_spelling():
    from tokengen.contract.spec import AUTO_RUNS, FIELD_TYPES, parse_field

    assert AUTO_RUNS == 0 and FIELD_TYPES["runs"] is int  # still an int: the CLI, Hydra's schema and MLflow agree
    assert parse_field("runs", "auto") == parse_field("runs", " AUTO ") == parse_field("runs", "0") == 0
    assert parse_field("runs", "7") == 7 and parse_field("target_ci", "0.05") == 0.05
    with pytest.raises(SpecError, match=r"runs='many' is not a valid int \(nor 'auto'\)"):
        parse_field("runs", "many")
    auto = resolve("kv_cache", model="tiny", runs="auto")
    assert auto.runs == 0 and auto.key() != resolve("kv_cache", model="tiny").key()
    assert auto.key() == resolve("kv_cache", model="tiny", runs=0).key()
    # the auto settings join the key only away from their defaults
    assert resolve("kv_cache", model="tiny", runs=0, max_runs=20).key() == auto.key()
    assert resolve("kv_cache", model="tiny", runs=0, max_runs=30).key() != auto.key()


def test_the_cli_and_hydra_take_runs_auto():
    from hydra import compose, initialize_config_dir

    from sweeps.planning.config import load_config, register
    from sweeps.planning.grid import plan_sweep
    from tokengen.cli import build_parser

    assert build_parser().parse_args(["--runs", "auto"]).runs == 0
    register()
    conf = str(__import__("pathlib").Path(__file__).resolve().parents[2] / "conf")
    for overrides, runs in (([], 0), (["trial.runs=5"], 5), (["trial.runs=auto"], 0)):
        with initialize_config_dir(config_dir=conf, version_base=None):
            config = load_config(compose("config", overrides=["+grid=smoke", *overrides]))
        assert {t.spec.runs for t in plan_sweep(config).trials} == {runs}, overrides
    with initialize_config_dir(config_dir=conf, version_base=None):
        config = load_config(compose("config", overrides=["+grid=smoke", "trial.runs=lots"]))
    with pytest.raises(SpecError, match="runs='lots' is not a valid int"):
        plan_sweep(config)


@pytest.mark.parametrize(
    "fields,message",
    [
        (dict(runs=-1), "runs must be an integer >= 1, or auto"),
        (dict(runs=0, min_runs=5, max_runs=4), "max_runs must be an integer >= min_runs=5"),
        (dict(runs=0, min_runs=0), "min_runs must be an integer >= 1"),
        (dict(runs=0, target_ci=0.0), "target_ci must be a fraction > 0"),
    ],
)
def test_auto_settings_that_cannot_run_are_refused(fields, message):
    from tokengen.contract.rules import problem

    assert problem(resolve("kv_cache", model="tiny", **fields)).startswith(message)
