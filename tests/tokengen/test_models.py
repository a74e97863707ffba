from __future__ import annotations

import json

import pytest
import torch

from tokengen.contract.model_facts import PRESET_FACTS, model_facts
from tokengen.contract.rules import resolve
from tokengen.contract.spec import SpecError
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


GOOD = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_positions": 64, "vocab_size": 64}
RESAVE = "save the model again with save_pretrained()"


@pytest.mark.parametrize(
    "config, end",
    [
        ("[1, 2]", f"has a config.json that is a JSON list, not a mapping of settings: {RESAVE}"),
        ('"gpt2"', f"has a config.json that is a JSON str, not a mapping of settings: {RESAVE}"),
        (
            '{"model_type": ',
            f"has a config.json that is not JSON (Expecting value: line 1 column 16 (char 15)): {RESAVE}",
        ),
        (
            {**GOOD, "text_config": [1]},
            f"has text_config=[1] in config.json, not a mapping of settings: fix it, or {RESAVE}",
        ),
        (
            {**GOOD, "architectures": "GPT2LMHeadModel"},
            'has architectures="GPT2LMHeadModel" in config.json, not a list',
        ),
        ({**GOOD, "n_positions": "1024"}, 'has n_positions="1024" in config.json, not a whole number: fix it'),
        ({**GOOD, "eos_token_id": {"id": 2}}, 'has eos_token_id={"id": 2} in config.json, not a token id or a list'),
        ({**GOOD, "text_config": {"vocab_size": True}}, "has text_config.vocab_size=true in config.json, not a whole"),
    ],
    ids=["list", "string", "not-json", "sub-config-list", "architectures", "positions", "eos", "sub-config-field"],
)
def test_a_damaged_checkpoint_config_of_any_shape_is_one_line_before_transformers(tmp_path, monkeypatch, config, end):
    """A config.json that is a list, or whose fields have the wrong shape, was a traceback from whichever reader
    met it first (the planner's JSON, or transformers' config classes): one line now, before either reads it."""
    import transformers

    def never(*args, **kwargs):
        raise AssertionError("transformers read a config the check should have refused")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", never)
    (tmp_path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    for reader in (model_facts, load_config):  # the planner's, and the trial's before it builds a model
        with pytest.raises(SpecError) as refused:
            reader(str(tmp_path))
        line = str(refused.value)
        assert line.startswith(f"model path {str(tmp_path)!r} {end}") and "\n" not in line, line
