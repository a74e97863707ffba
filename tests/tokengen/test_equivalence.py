"""Every CPU knob combination returns exactly transformers' generate() tokens in float32.

Workloads that can tell: each row has its own prompt (P = 8), the rows' generated tokens differ,
and under stop=model a checkpoint whose EOS ids (a list, as Llama-3's) are said by the rows at
different steps makes each row end on its own.
"""

from __future__ import annotations

import pytest
import torch
from transformers import masking_utils

from tokengen.contract.declarations import declared, names, values
from tokengen.contract.rules import cuda_only_reason, resolve
from tokengen.contract.variants import VARIANTS
from tokengen.decode.loop import Generator
from tokengen.decode.stopping import target_lengths
from tokengen.engines.hf_generate import hf_generate
from tokengen.models import build_model, eos_ids

MODELS = ["tiny", "llama-tiny"]
STOPS = ["never", "model", "uniform:2-10"]
CPU_CHECKS = [d.name for d in values("stop_check") if not d.cuda_only]
KNOBS = [(cache, check) for cache in names("cache") for check in CPU_CHECKS]
"""Every declared cache with every declared stop check a CPU runs."""
B, P, S = 3, 8, 14  # batch, prompt_len, max_seqlen

_models: dict = {}


def model_for(name: str):
    if name not in _models:
        _models[name] = build_model(name, "float32", "cpu", seed=0)
    return _models[name]


def spec_for(model: str, variant: str | None = None, **fields):
    return resolve(variant, model=model, batch_size=B, max_seqlen=S, **{"prompt_len": P, **fields})


def generate(model: str, variant: str | None = None, **fields):
    return Generator(model_for(model), spec_for(model, variant, **fields))()


def first_said(generated: torch.Tensor) -> list[dict[int, int]]:
    """Per row: token -> the first step (0-based) it is said at."""
    firsts = []
    for row in generated.tolist():
        first: dict[int, int] = {}
        for step, token in enumerate(row):
            first.setdefault(token, step)
        firsts.append(first)
    return firsts


def eos_ending_rows_apart(generated: torch.Tensor) -> list[int]:
    """For each row of a stop=never run (B, S), an id only that row says, first said at a step no
    other row ends at (the earliest after step 0 where there is one): as EOS ids, they end every
    row on its own, at a different step."""
    chosen, used = [], set()
    for r, first in enumerate(first_said(generated)):
        others = set(torch.cat([generated[:r], generated[r + 1 :]]).flatten().tolist())
        options = sorted((step, token) for token, step in first.items() if token not in others and step not in used)
        step, token = ([o for o in options if o[0] > 0] or options)[0]
        chosen.append(token)
        used.add(step)
    return chosen


@pytest.fixture(scope="module")
def eos_checkpoint(tmp_path_factory) -> dict[str, str]:
    """Preset -> a local checkpoint of the same weights whose EOS ids are [the preset's own EOS (never
    said, so it pads), then one id per row]: every row ends on its own step."""
    paths = {}
    for name in MODELS:
        generated = generate(name, cache="dynamic", stop="never").tokens[:, P:]  # (B, S)
        pad = eos_ids(model_for(name).config)[0]
        assert pad not in generated, "the padding id must differ from what a row would say next"
        net = build_model(name, "float32", "cpu", seed=0)
        net.config.eos_token_id = net.generation_config.eos_token_id = [pad, *eos_ending_rows_apart(generated)]
        paths[name] = str(tmp_path_factory.mktemp(name))
        net.save_pretrained(paths[name])
    return paths


def test_the_knob_grid_covers_every_cpu_preset():
    cpu = {
        (knobs["cache"], knobs["stop_check"])
        for name, knobs in VARIANTS.items()
        if cuda_only_reason(resolve(name, device="cpu")) is None
        and knobs["compile"] == "off"
        and knobs.get("engine", "loop") == "loop"
    }
    assert {("none", "sync"), ("dynamic", "sync"), ("static", "sync"), ("static", "none")} <= cpu <= set(KNOBS)
    assert {check for _, check in KNOBS} == {check for _, check in cpu}, "every CPU check is some CPU preset's"


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stop", STOPS)
def test_every_cpu_knob_combination_returns_generates_tokens(model, stop, eos_checkpoint):
    name = eos_checkpoint[model] if stop == "model" else model
    expected = hf_generate(model_for(name), spec_for(name, cache="dynamic", stop=stop))  # (B, P + steps)
    assert len({tuple(row) for row in expected[:, P:].tolist()}) == B, "rows must differ to prove anything"
    pad = eos_ids(model_for(name).config)[0]
    for cache, check in KNOBS:
        got = generate(name, cache=cache, stop_check=check, stop=stop)
        if declared("stop_check", check).overrun is None:
            # runs every step: generate()'s tokens, then EOS padding (none for stop=never)
            assert got.steps == S and got.tokens.shape == (B, P + S), (cache, check)
            assert torch.equal(got.tokens[:, : expected.shape[1]], expected), (cache, check)
            assert (got.tokens[:, expected.shape[1] :] == pad).all(), (cache, check)
        else:
            assert torch.equal(got.tokens, expected), (cache, check)
            assert got.steps == expected.shape[1] - P and got.prompt_len == P


@pytest.mark.parametrize("model", MODELS)
def test_each_row_ends_at_its_own_eos(model, eos_checkpoint):
    """A row is padded from the step after its own EOS, whatever the other rows still say."""
    path = eos_checkpoint[model]
    never = generate(path, cache="static", stop="never").tokens[:, P:]  # (B, S)
    eos = eos_ids(model_for(path).config)
    got = generate(path, cache="static", stop="model").tokens[:, P:]  # (B, steps)
    ends = [min(first[t] for t in eos if t in first) for first in first_said(never)]
    assert len(set(ends)) == B  # the checkpoint's rows end at different steps
    assert got.shape[1] == max(ends) + 1
    for row, end in enumerate(ends):
        assert torch.equal(got[row, : end + 1], never[row, : end + 1])  # up to its EOS, its own tokens
        assert (got[row, end + 1 :] == eos[0]).all()  # then padding, though other rows go on


@pytest.mark.parametrize("model", MODELS)
def test_length_distribution_ends_each_sequence_at_its_target(model):
    never = generate(model, cache="dynamic", stop="never", seed=3).tokens
    got = generate(model, cache="dynamic", stop="uniform:2-10", seed=3)
    targets = target_lengths("uniform:2-10", B, S, seed=3).tolist()
    assert got.steps == max(targets) and len(set(targets)) > 1
    eos = eos_ids(model_for(model).config)[0]
    for row, never_row, length in zip(got.tokens, never, targets):
        assert torch.equal(row[: P + length - 1], never_row[: P + length - 1])  # the model's, before the target
        assert (row[P + length - 1 :] == eos).all()  # the target step itself says EOS, then padding


@pytest.mark.parametrize("cache", ["none", "dynamic", "static"])
def test_step_zero_is_one_prefill_forward_then_one_token_per_step(cache):
    """The lead times step 0 as time to first token: it must hold the whole prompt's forward."""
    model = model_for("llama-tiny")
    seen: list[tuple[int, int]] = []  # (step, input length) per forward
    current = {"step": -1}

    def wrap(step):
        def marked(i):
            current["step"] = i
            step(i)

        return marked

    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append((current["step"], (args[0] if args else kwargs["input_ids"]).shape)),
        with_kwargs=True,
    )
    try:
        generator = Generator(model, spec_for("llama-tiny", cache=cache, stop="never"))
        generator(wrap_step=wrap)
    finally:
        hook.remove()
    fed = [(i, P + i) if cache == "none" else (i, 1) for i in range(1, S)]
    assert seen == [(0, torch.Size((B, P)))] + [(i, torch.Size((B, n))) for i, n in fed]
    if cache == "static":
        assert generator.cache.cache.layers[0].keys.shape[2] == P + S  # sized for prompt and decode


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("cache", ["none", "static"])
def test_no_hidden_sync_in_transformers_mask_code(model, cache, monkeypatch):
    """With no cache, transformers' mask code reads a device tensor on the host in every forward
    (find_packed_sequence_indices), and at a static cache's prefill (_ignore_causal_mask_sdpa's
    `q_offset == 0`). Our prebuilt masks skip both, and the tokens are those of the path they skip."""
    calls = []
    for name in ("find_packed_sequence_indices", "_ignore_causal_mask_sdpa"):
        real = getattr(masking_utils, name)
        monkeypatch.setattr(
            masking_utils, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k)
        )
    generator = Generator(model_for(model), spec_for(model, cache=cache, stop="never"))
    ours = generator().tokens
    assert calls == []
    if cache == "none":
        generator.cache.mask = None
    else:
        generator.cache.prefill_mask = None
    theirs = generator().tokens  # transformers builds the masks: the spies see it
    assert calls and torch.equal(ours, theirs)


@pytest.mark.parametrize("stop", ["model", "uniform:2-10"])
def test_generate_peers_agree_whatever_their_cache(stop, eos_checkpoint):
    """hf_generate is a peer engine too: its no-cache and static runs return its dynamic run's tokens."""
    name = eos_checkpoint["llama-tiny"] if stop == "model" else "llama-tiny"
    dynamic = hf_generate(model_for(name), spec_for(name, cache="dynamic", stop=stop))
    for cache in ("none", "static"):
        assert torch.equal(hf_generate(model_for(name), spec_for(name, cache=cache, stop=stop)), dynamic), cache


def test_bos_only_prompt_matches_generate():
    """The article's setting (P = 1): rows are alike from one BOS, but every cache still agrees."""
    for cache in ("none", "dynamic", "static"):
        spec = spec_for("tiny", cache=cache, stop="never", prompt_len=1)
        ours = Generator(model_for("tiny"), spec)()
        assert ours.tokens.shape == (B, 1 + S)
        assert torch.equal(ours.tokens, hf_generate(model_for("tiny"), spec)), cache


def test_seeded_topk_sampling_is_reproducible_and_cache_independent():
    a = generate("llama-tiny", "baseline", sampling="topk:20,0.8", seed=5).tokens
    for variant in ("kv_cache", "static_cache"):
        assert torch.equal(a, generate("llama-tiny", variant, sampling="topk:20,0.8", seed=5).tokens), variant
    greedy = generate("llama-tiny", "baseline", seed=5).tokens
    other_seed = generate("llama-tiny", "baseline", sampling="topk:20,0.8", seed=6).tokens
    assert torch.equal(a[:, :P], greedy[:, :P]) and not torch.equal(a, greedy)  # same prompts: it samples
    assert not torch.equal(a[:, P:], other_seed[:, P:])
    assert len({tuple(r) for r in a[:, P:].tolist()}) == B


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generator_is_reusable_across_runs(cache):
    generate_once = Generator(model_for("llama-tiny"), spec_for("llama-tiny", cache=cache))
    assert torch.equal(generate_once().tokens, generate_once().tokens)


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["none", "dynamic", "static"])
@pytest.mark.parametrize("stop_check", ["sync", "none"])
def test_compiled_knob_combinations_match_the_baseline(cache, stop_check):
    """The rest of the CPU-capable knob space: torch.compile over every cache, with and without a
    check; a second run recompiles nothing (the prefill runs eager, decode has its shapes)."""
    from torch._dynamo.utils import counters

    base = generate("llama-tiny", "baseline", stop="uniform:2-10")
    compiled = Generator(
        model_for("llama-tiny"),
        spec_for("llama-tiny", cache=cache, compile="default", stop_check=stop_check, stop="uniform:2-10"),
    )
    got = compiled()
    graphs = counters["stats"]["unique_graphs"]
    assert torch.equal(compiled().tokens, got.tokens) and counters["stats"]["unique_graphs"] == graphs
    if stop_check == "none":
        assert torch.equal(got.tokens[:, : P + base.steps], base.tokens)
    else:
        assert (got.steps, got.tokens.shape) == (base.steps, base.tokens.shape)
        assert torch.equal(got.tokens, base.tokens)
