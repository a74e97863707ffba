"""Speculative decoding (tokengen/decode/speculate.py, proposers.py): proposals verified in one forward return the
one-token loop's tokens, bit for bit, on random and on trained weights, on the dynamic and the static cache, with a
proposer that is right, wrong or partly right; what the advance did is counted exactly; what cannot run is refused
in one line; a trial proves its tokens against its plain twin and says where they diverge (tokengen/measure/
speculation_proof.py); transformers' own speculation is the peer; the report sets each trial beside its twin.

The trained model is the draft recipe built in a few dozen steps on modules of short functions (their names
repeat: what prompt lookup is for), carried as $TOKENGEN_TRAINED_DIR's `tiny-trained`, with a three-step build as
its draft companion: seconds, never the real preset's minutes.
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy
import pandas as pd
import pytest
import torch

from tokengen.contract.fidelity import below_gate, speculative_verdict
from tokengen.contract.rules import incompatibility, resolve
from tokengen.contract.trained import CARRIED_VARIABLE, RECIPES
from tokengen.decode.loop import Generator
from tokengen.decode.proposers import DraftModel, lookup
from tokengen.decode.speculate import Speculative
from tokengen.engines import make_generator
from tokengen.measure import speculation_proof
from tokengen.models import build_model
from tokengen.train.checkpoints import obtain

TARGET, DRAFT = "tiny-trained", "tiny-trained-draft"


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def carried(tmp_path_factory):
    """$TOKENGEN_TRAINED_DIR's folder: `tiny-trained` (the draft recipe, 40 steps on repeating functions) and its
    draft companion (3 steps)."""
    corpus = tmp_path_factory.mktemp("functions")
    for f in range(16):
        body = "".join(f"def step_{f}_{j}(value):\n    return value + {j}\n\n\n" for j in range(30))
        (corpus / f"m{f:02d}.py").write_text("import os\n\n\n" + body)
    built, folder = tmp_path_factory.mktemp("built"), tmp_path_factory.mktemp("carried")
    for name, steps in ((TARGET, 40), (DRAFT, 3)):
        recipe = dataclasses.replace(RECIPES[DRAFT], steps=steps, lr=0.01, warmup=5, threads=1, heldout_every=4)
        path, _ = obtain(DRAFT, recipe, corpus, built / name, progress=False)
        shutil.copytree(path, folder / name)
    return folder


@pytest.fixture
def trained(carried, monkeypatch):
    monkeypatch.setenv(CARRIED_VARIABLE, str(carried))
    return build_model(TARGET, "float32", "cpu", 0)


def test_prompt_lookup_copies_what_followed_the_latest_match_of_the_longest_suffix():
    seq = numpy.array([5, 1, 2, 3, 9, 8, 7, 2, 3, 4, 6, 1, 2, 3])
    assert lookup(seq, 3).tolist() == [9, 8, 7]  # 1 2 3 matched (not the later 2 3, a shorter suffix)
    assert lookup(numpy.array([5, 2, 3, 7, 2, 3, 8, 0, 3]), 2).tolist() == [8, 0]  # 3: its latest match
    assert lookup(numpy.array([4, 7, 4, 7, 4]), 5).tolist() == [7, 4, 7, 4, 7]  # a copy runs on into itself
    assert lookup(numpy.array([1, 2, 3]), 4) is None  # no suffix occurs earlier


def _point(**fields):
    return dict(batch_size=1, prompt_len=24, max_seqlen=32, **fields)


class Oracle:
    """Proposes the reference's next k tokens with the one at `wrong[v]` changed (k: none changed) in verify v."""

    def __init__(self, reference: torch.Tensor, k: int, wrong: list[int], vocab: int):
        self.reference, self.k, self.wrong, self.vocab, self.verify = reference, k, wrong, vocab, 0

    def start(self, lane) -> None:
        self.lane, self.verify = lane, 0

    def propose(self, length: int) -> torch.Tensor:
        at = self.lane.prompt_len + length
        proposed = self.reference[:, at : at + self.k].clone()  # (1, k)
        spoiled = self.wrong[self.verify % len(self.wrong)]
        if spoiled < self.k:
            proposed[:, spoiled] = (proposed[:, spoiled] + 1) % self.vocab
        self.verify += 1
        return proposed

    def kept(self, length: int) -> None:
        pass


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_on_random_weights_every_proposer_returns_the_one_token_loops_tokens(cache):
    """Prompt lookup at each k, and draft models at each k that disagree with the model (another seed) or agree
    with it (its own weights: every proposal accepted), each under a drawn length and none."""
    model, other = build_model("tiny", "float32", "cpu", 0), build_model("tiny", "float32", "cpu", 1)
    for stop in ("never", "uniform:5-32"):
        point = _point(model="tiny", cache=cache, stop=stop)
        expected = Generator(model, resolve(None, **point))().tokens
        for k in (2, 4, 8):
            spec = resolve(None, speculate=f"lookup{k}", **point)
            generator = Generator(model, spec)
            done = generator()
            assert torch.equal(done.tokens, expected), (cache, stop, k)
            assert done.counts.proposed == k * done.counts.verifies and done.counts.accepted <= done.counts.proposed
            for draft in (other, model) if k == 4 else (other,):  # tiny has no draft companion: one is given
                generator.advance = Speculative(spec, DraftModel(spec, k, draft), k)
                done = generator()
                assert torch.equal(done.tokens, expected), (cache, stop, k)
                if draft is model:
                    assert done.counts.accepted == done.counts.proposed > 0


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_a_proposer_wrong_at_a_chosen_place_is_rolled_back_and_counted_exactly(trained, cache):
    """Verify v's proposals are the right tokens but for the one at wrong[v] (k: all right): the verify accepts
    exactly the proposals before it, the cache is rolled back past the rest, and the tokens are still exact."""
    k, wrong = 4, [0, 2, 4, 1, 3]
    point = dict(model=TARGET, cache=cache, stop="never", batch_size=1, prompt_len=64, max_seqlen=40)
    expected = Generator(trained, resolve(None, **point))().tokens
    spec = resolve(None, speculate="lookup4", **point)
    generator = Generator(trained, spec)
    generator.advance = Speculative(spec, Oracle(expected, k, wrong, trained.config.vocab_size), k)
    done = generator()
    counts = done.counts
    assert torch.equal(done.tokens, expected)
    accepted = [wrong[v % len(wrong)] for v in range(counts.verifies)]
    assert (counts.accepted, counts.proposed) == (sum(accepted), k * counts.verifies)
    made = 1 + sum(a + 1 for a in accepted)  # the prefill's token, then each verify's accepted and its own
    assert made + (counts.forwards - 1 - counts.verifies) == spec.max_seqlen  # the rest: one token per forward
    assert made > spec.max_seqlen - k - 1  # verifies ran until k + 1 more tokens no longer fit


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_on_a_few_step_trained_model_both_proposers_return_the_plain_tokens(trained, cache):
    """Held-out text as prompts, rows that end at the model's own EOS: prompt lookup and the draft companion."""
    point = dict(model=TARGET, cache=cache, stop="model", batch_size=1, prompt_len=64, max_seqlen=48)
    for seed in (0, 1):
        expected = make_generator(trained, resolve(None, seed=seed, **point))().tokens
        for name in ("lookup4", "draft2"):
            done = make_generator(trained, resolve(None, speculate=name, seed=seed, **point))()
            assert torch.equal(done.tokens, expected), (cache, name, seed)
            assert done.counts.accepted > 0, (cache, name, seed)
        spec = resolve(None, speculate="draft4", seed=seed, **point)
        generator = Generator(trained, spec)
        generator.advance = Speculative(spec, DraftModel(spec, 4, trained), 4)  # the model as its own draft
        done = generator()
        assert torch.equal(done.tokens, expected) and done.counts.accepted == done.counts.proposed > 0, (cache, seed)


@torch.inference_mode()
def greedy_continuation(model, seq: torch.Tensor, k: int) -> torch.Tensor:
    """k greedy tokens after `seq` (1, T), each from a full forward: no cache to get wrong."""
    for _ in range(k):
        seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seq[:, -k:]


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_the_draft_proposes_its_own_greedy_continuation_of_the_rows_so_far(carried, trained, cache):
    """After every verify, rejections included, the draft's cache holds exactly the rows' tokens: each proposal is
    what the draft model says from scratch."""
    draft = build_model(DRAFT, "float32", "cpu", 0)
    spec = resolve(None, speculate="draft4", model=TARGET, cache=cache, stop="never", batch_size=1, prompt_len=64,
                   max_seqlen=40)  # fmt: skip
    proposer, seen = DraftModel(spec, 4, draft), []
    propose = proposer.propose
    proposer.propose = lambda length: seen.append((length, propose(length))) or seen[-1][1]
    generator = Generator(trained, spec)
    generator.advance = Speculative(spec, proposer, 4)
    tokens = generator().tokens
    assert generator.advance.counts().accepted < generator.advance.counts().proposed  # rejections happened
    for length, proposed in seen:
        assert torch.equal(proposed, greedy_continuation(draft, tokens[:, : 64 + length], 4)), length


def test_the_cli_prints_acceptance_and_proves_its_tokens_against_the_plain_loop(carried, monkeypatch, capsys, tmp_path):
    from tokengen.cli import main
    from tokengen.contract.record import TrialResult

    monkeypatch.setenv(CARRIED_VARIABLE, str(carried))
    out = tmp_path / "record.json"
    point = ["--batch-size", "1", "--prompt-len", "64", "--max-seqlen", "48", "--runs", "1", "--warmup", "0"]
    assert main(["--model", TARGET, "--stop", "model", "--cache", "static", "--speculate", "lookup4", *point,
                 "--json", str(out)]) == 0  # fmt: skip
    record = TrialResult.from_json(out.read_text())
    assert (record.fidelity, record.fidelity_verdict, record.rows_exact) == ("speculative", "ok", 1)
    assert 0 < record.acceptance_rate <= 1 and 0 < record.accepted_per_verify <= 4
    assert record.forwards_per_token < 1 and 0 < record.proposer_share < 1
    printed = capsys.readouterr().out
    assert "Speculation: acceptance " in printed and "without speculation: ok (1 of 1 rows" in printed


def test_transformers_own_speculation_is_the_peer_and_returns_our_tokens(trained):
    """generate() speculates (fewer forwards of the model than tokens, as ours) and returns our tokens."""
    point = dict(model=TARGET, cache="dynamic", stop="model", batch_size=1, prompt_len=64, max_seqlen=48, seed=1)
    forwards = []
    hook = trained.register_forward_hook(lambda *args: forwards.append(1))
    for name in ("lookup2", "draft4"):
        ours = make_generator(trained, resolve(None, speculate=name, **point))().tokens
        forwards.clear()
        peer = make_generator(trained, resolve("hf_generate", speculate=name, **point))().tokens
        assert torch.equal(peer, ours), name
        assert len(forwards) < peer.shape[1] - point["prompt_len"], (name, len(forwards))
    hook.remove()


def test_what_cannot_run_is_refused_in_one_line_that_names_the_fix():
    point = dict(model="tiny", cache="dynamic", batch_size=1, speculate="lookup4")
    reasons = {
        "sampled": incompatibility(resolve(None, **{**point, "sampling": "topk:5"})),
        "requests": incompatibility(resolve(None, **{**point, "cache": "static", "requests": 4})),
        "no cache": incompatibility(resolve(None, **{**point, "cache": "none"})),
        "rows": incompatibility(resolve(None, **{**point, "batch_size": 2})),
        "no draft": incompatibility(resolve(None, **{**point, "speculate": "draft4"})),
        "peer static": incompatibility(resolve("hf_generate_static", batch_size=1, speculate="lookup2")),
    }
    assert reasons == {
        "sampled": "speculate=lookup4 is greedy only (got sampling=topk:5): use sampling=greedy",
        "requests": "speculate=lookup4 runs one batch: use speculate=none for requests, or requests=0",
        "no cache": "speculate=lookup4 needs a cache that keeps keys and values (got cache=none): "
        "use cache=dynamic or cache=static",
        "rows": "speculate=lookup4 generates one row at most (got batch_size=2): use batch_size=1",
        "no draft": "speculate=draft4 proposes with the model's draft companion, and model tiny has none: "
        "use model=tiny-trained",
        "peer static": "engine=generate runs speculate=lookup2 only with cache=dynamic, compile=off "
        "(got cache=static): use cache=dynamic",
    }
    assert incompatibility(resolve(None, **{**point, "model": TARGET, "speculate": "draft8"})) is None
    assert incompatibility(resolve("hf_generate", batch_size=1, speculate="draft2", model=TARGET)) is None


def test_a_divergence_is_named_by_its_step_and_the_twins_margin_never_ok():
    model = build_model("tiny", "float32", "cpu", 0)
    spec = resolve(None, speculate="lookup4", **_point(model="tiny", cache="dynamic", stop="never"))
    tokens = make_generator(model, spec)().tokens
    assert speculation_proof.measure(spec, model, tokens)["fidelity_verdict"] == "ok"
    spoiled = tokens.clone()
    spoiled[0, spec.prompt_len + 5 :] = 7  # from decode step 5 on
    found = speculation_proof.measure(spec, model, spoiled)
    margin = found["divergence_margin"]
    assert (found["rows_exact"], found["first_divergence_step"]) == (0, 5) and margin > 0
    assert found["fidelity_verdict"] == f"diverged at step 5 (reference margin {margin:.3g})"
    assert speculative_verdict(5, 2e-4, "float32") == "diverged at step 5 (reference margin 0.0002: near-tie < 0.001)"
    assert below_gate(speculative_verdict(5, 2e-4, "float32")) and not below_gate("ok")


def test_the_report_sets_each_trial_beside_its_twin_with_acceptance_the_librarys_own_and_the_mark(carried, monkeypatch):
    from tokengen.measure.trial import run_trial
    from tracking.report.advance_tables import advance_tables
    from tracking.report.comparison import prepare
    from tracking.report.marks import marked_cells

    monkeypatch.setenv(CARRIED_VARIABLE, str(carried))
    point = dict(model=TARGET, stop="model", batch_size=1, prompt_len=64, max_seqlen=32, runs=2)
    records = [run_trial(resolve("baseline", **point))] + [
        run_trial(resolve(variant, speculate=name, **point))
        for variant in ("kv_cache", "hf_generate")
        for name in ("none", "lookup4")
    ]
    frame = pd.DataFrame([{**r, "trial_key": r["key"], "run_id": r["key"], "gpu_type": None} for r in records])
    frame = frame.assign(measurement="ok")  # as if measured on a quiet machine: marks from the tokens alone
    prepared, _ = prepare(frame)
    assert dict(zip(prepared["variant"], prepared["tokens"]))["kv_cache_lookup4"] == "ok"
    [(knob, table)] = advance_tables(prepared)
    rows = table.set_index("variant")
    assert knob == "speculate" and sorted(rows.index) == ["hf_generate_lookup4", "kv_cache_lookup4"]
    ours, peer = rows.loc["kv_cache_lookup4"], rows.loc["hf_generate_lookup4"]
    assert (ours["plain_variant"], peer["plain_variant"]) == ("kv_cache", "hf_generate") and ours["interval"]
    assert 0 < ours["acceptance_rate"] <= 1 and ours["forwards_per_token"] < 1
    runtime = dict(zip(prepared["variant"], prepared["runtime_mean_s"]))
    assert ours["vs_library"] == pytest.approx(runtime["hf_generate_lookup4"] / runtime["kv_cache_lookup4"])
    compared = dict(zip(prepared["variant"], prepared["compared"]))
    assert compared["kv_cache_lookup4"] == "run"  # the same tokens in fewer steps: its runtime is compared
    assert pd.isna(peer["acceptance_rate"]) and pd.isna(peer["vs_library"]) and not any(marked_cells(table, "vs_plain"))
    step = [None, None, 3, None, None]  # kv_cache_lookup4's tokens diverged from its twin's at decode step 3
    prepared, _ = prepare(frame.assign(first_divergence_step=step, divergence_margin=[None, None, 0.5, None, None]))
    row = prepared[prepared["variant"] == "kv_cache_lookup4"].iloc[0]
    assert row["tokens"] == "diverged at step 3 (reference margin 0.5)" and bool(row["speedup_marked"])
    [(_, table)] = advance_tables(prepared)
    assert dict(zip(table["variant"], marked_cells(table, "vs_plain"))) == {
        "hf_generate_lookup4": False,
        "kv_cache_lookup4": True,
    }


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_compiled_the_verify_keeps_one_shape_and_the_tokens(cache):
    """torch.compile's graphs: the one-token step's and the verify's (R, k + 1), the prefill eager."""
    from tokengen.measure import compile_counters

    model = build_model("tiny", "float32", "cpu", 0)
    point = _point(model="tiny", cache=cache, stop="uniform:8-32", compile="default")
    expected = Generator(model, resolve(None, **point))().tokens
    compile_counters.start()
    generator = Generator(model, resolve(None, speculate="lookup4", **point))
    for _ in range(2):
        assert torch.equal(generator().tokens, expected)
    assert compile_counters.read("default")["compile_graph_breaks"] == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["lookup4", "draft2"])
def test_on_a_gpu_the_verify_replays_as_a_cuda_graph_and_keeps_the_tokens(name):
    """CUDA graphs (compile=reduce-overhead) on the static cache: the verify's fixed shape is recorded once and
    replayed; the tokens are the eager one-token loop's."""
    model = build_model("tiny", "float32", "cuda", 0)
    point = _point(model="tiny", device="cuda", cache="static", stop="uniform:8-32")
    expected = Generator(model, resolve(None, **point))().tokens
    spec = resolve(None, speculate=name.replace("draft", "lookup"), compile="reduce-overhead", **point)
    generator = Generator(model, spec)
    if name.startswith("draft"):  # tiny has no draft companion: one is given, compiled and graphed as the model
        generator.advance = Speculative(spec, DraftModel(spec, 2, build_model("tiny", "float32", "cuda", 1)), 2)
    for _ in range(3):
        assert torch.equal(generator().tokens.cpu(), expected.cpu())
