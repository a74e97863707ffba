from __future__ import annotations

import torch

from tokengen.contract.models import PRESET_FACTS, model_facts
from tokengen.contract.rules import resolve
from tokengen.decode.loop import Generator
from tokengen.models import MODELS, build_model, eos_ids, load_config, max_positions, weight_bytes


def test_same_seed_same_weights_different_seed_different_weights():
    a, b, c = (build_model("tiny", "float32", "cpu", seed) for seed in (0, 0, 1))
    sa, sb, sc = (m.state_dict() for m in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_presets_match_the_design():
    gpt2 = load_config("gpt2")
    assert (gpt2.n_layer, gpt2.n_head, gpt2.n_embd, gpt2.vocab_size, gpt2.n_positions) == (12, 12, 768, 50257, 1024)
    tiny = load_config("tiny")
    assert (tiny.n_layer, tiny.n_head, tiny.n_embd) == (2, 4, 128)
    assert {"tiny", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"} <= set(MODELS)
    assert any(load_config(name).model_type == "llama" for name in MODELS)


def test_the_planners_model_facts_are_the_built_configs():
    """The planner reads a preset's facts without transformers (it would import torch); they must be
    what the built config says, or a grid would be checked against the wrong positions or EOS."""
    assert set(PRESET_FACTS) == set(MODELS)
    for name in MODELS:
        config, facts = load_config(name), model_facts(name)
        assert (facts.positions, list(facts.eos_ids), facts.vocab_size) == (
            max_positions(config),
            eos_ids(config),
            config.vocab_size,
        ), name


def test_dtype_cast_and_eval():
    model = build_model("tiny", "bfloat16", "cpu", 0)
    assert next(model.parameters()).dtype == torch.bfloat16 and not model.training
    # tiny GPT-2 by hand: wte 50257x128 (tied with the LM head: once) + wpe 1024x128 + 2 layers x 198,272
    # (ln 256, c_attn 49,536, attn c_proj 16,512, ln 256, c_fc 66,048, mlp c_proj 65,664) + ln_f 256
    assert weight_bytes(model) == 2 * (50257 * 128 + 1024 * 128 + 2 * 198_272 + 256)


def test_local_checkpoint_loads_offline_and_generates_the_same_tokens(tmp_path):
    source = build_model("tiny", "float32", "cpu", 0)
    source.save_pretrained(tmp_path)
    spec_local = resolve("kv_cache", model=str(tmp_path), batch_size=2, max_seqlen=8)
    spec_preset = resolve("kv_cache", model="tiny", batch_size=2, max_seqlen=8)
    local = build_model(str(tmp_path), "float32", "cpu", seed=123)  # seed does not touch a checkpoint
    assert torch.equal(Generator(local, spec_local)().tokens, Generator(source, spec_preset)().tokens)
