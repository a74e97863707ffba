"""Every CPU-capable variant returns exactly the baseline's tokens in float32."""

from __future__ import annotations

import pytest
import torch

from tokengen.generate import Generator
from tokengen.measure import tokens_sha256
from tokengen.models import build_model
from tokengen.presets import PRESETS
from tokengen.reference import comparable, hf_generate
from tokengen.validate import cuda_only_reason, resolve

CPU_PRESETS = [
    name for name, knobs in PRESETS.items()
    if cuda_only_reason(resolve(name, device="cpu")) is None and knobs["compile"] == "off"
]
STOPS = ["never", "model", "uniform:2-10"]

_models: dict = {}


def model_for(name: str):
    if name not in _models:
        _models[name] = build_model(name, "float32", "cpu", seed=0)
    return _models[name]


def generate(variant: str, model: str = "tiny", **fields):
    spec = resolve(variant, model=model, batch_size=3, max_seqlen=14, **fields)
    return Generator(model_for(model), spec)()


def test_cpu_presets_cover_the_article_rows():
    assert {"baseline", "kv_cache", "static_cache", "kv_cache_nocheck", "static_cache_nocheck"} <= set(CPU_PRESETS)


@pytest.mark.parametrize("model", ["tiny", "llama-tiny"])
@pytest.mark.parametrize("stop", STOPS)
def test_every_cpu_preset_matches_the_baseline(model, stop):
    base = generate("baseline", model, stop=stop)
    eos = model_for(model).config.eos_token_id
    for variant in CPU_PRESETS:
        got = generate(variant, model, stop=stop)
        if PRESETS[variant]["stop_check"] == "none":
            # runs every step: the baseline's tokens, then EOS padding (none for stop=never)
            assert got.steps == 14
            assert torch.equal(got.tokens[:, : base.steps + 1], base.tokens), variant
            if stop != "never":
                assert (got.tokens[:, base.steps + 1 :] == eos).all(), variant
        else:
            assert got.steps == base.steps, variant
            assert tokens_sha256(got.tokens) == tokens_sha256(base.tokens), variant


def test_length_distribution_ends_each_sequence_at_its_target():
    from tokengen.stopping import target_lengths

    got = generate("kv_cache", stop="uniform:2-10", seed=3)
    targets = target_lengths("uniform:2-10", 3, 14, seed=3)
    assert got.steps == int(targets.max())
    eos = model_for("tiny").config.eos_token_id
    for row, length in zip(got.tokens, targets.tolist()):
        assert row[length] == eos  # the target step itself says EOS
        assert (row[length:] == eos).all()


@pytest.mark.parametrize("model", ["tiny", "llama-tiny"])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("stop", ["never", "model"])
def test_matches_transformers_generate(model, cache, stop):
    spec = resolve(None, model=model, cache=cache, stop=stop, batch_size=2, max_seqlen=12)
    assert comparable(spec)
    ours = Generator(model_for(model), spec)().tokens
    assert torch.equal(ours, hf_generate(model_for(model), spec))


def test_seeded_topk_sampling_is_reproducible_and_cache_independent():
    a = generate("baseline", sampling="topk:20,0.8", seed=5)
    b = generate("static_cache", sampling="topk:20,0.8", seed=5)
    c = generate("static_cache", sampling="topk:20,0.8", seed=6)
    assert torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.tokens, c.tokens)
    assert len({tuple(r.tolist()) for r in a.tokens}) > 1  # rows differ: it samples


def test_generator_is_reusable_across_runs():
    spec = resolve("static_cache", model="tiny", batch_size=2, max_seqlen=10)
    generate_once = Generator(model_for("tiny"), spec)
    assert torch.equal(generate_once().tokens, generate_once().tokens)


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["none", "dynamic", "static"])
@pytest.mark.parametrize("stop_check", ["sync", "none"])
def test_compiled_knob_combinations_match_the_baseline(cache, stop_check):
    """The rest of the CPU-capable knob space: torch.compile over every cache, with and without a check."""
    base = generate("baseline", stop="uniform:2-10")
    got = generate(None, stop="uniform:2-10", cache=cache, compile="default", stop_check=stop_check)
    if stop_check == "none":
        assert torch.equal(got.tokens[:, : base.steps + 1], base.tokens)
    else:
        assert (got.steps, tokens_sha256(got.tokens)) == (base.steps, tokens_sha256(base.tokens))
