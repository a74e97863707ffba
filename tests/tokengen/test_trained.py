"""The trained presets: built from text by a fixed recipe, kept under a key, rebuilt where damaged, found and
measured as any local checkpoint, with held-out prompts and rows that end at the model's own EOS.

The tests build the recipe in a few steps, on one thread (OpenMP's spinning threads would burn the suite's cores),
on small corpora: stdlib files, or short generated functions a few steps learn to end. The real preset's build is
tests/tokengen/test_trained_build.py's (600 CPU-seconds: run on request).
"""

from __future__ import annotations

import dataclasses
import shutil
import sysconfig
from pathlib import Path

import pytest
import torch

from tokengen.contract import trained as contract
from tokengen.contract.fact_rules import draft_for
from tokengen.contract.machine.fingerprint import facts, model_files_hash
from tokengen.contract.record import TrialResult
from tokengen.contract.rules import resolve
from tokengen.contract.spec import SpecError
from tokengen.contract.trained import CARRIED_VARIABLE, CONFIG, HELDOUT, MANIFEST, RECIPES, WEIGHTS, damage
from tokengen.contract.weight_files import safetensors_metadata, weights_problem
from tokengen.train import documents, ensure
from tokengen.train.checkpoints import obtain

STDLIB = Path(sysconfig.get_paths()["stdlib"])
REAL_FILES = ("abc.py", "bisect.py", "colorsys.py", "copy.py", "fnmatch.py", "genericpath.py", "heapq.py")
REAL_FILES += ("keyword.py", "linecache.py", "numbers.py", "opcode.py", "queue.py", "shlex.py", "textwrap.py")
DRAFT = "tiny-trained-draft"
FEW = dataclasses.replace(RECIPES[DRAFT], steps=3, threads=1, heldout_every=4)
"""The draft's recipe in three steps: seconds, and the same code path as the real build."""
ENDING = dataclasses.replace(RECIPES[DRAFT], steps=60, batch=4, lr=0.01, warmup=10, threads=1, heldout_every=4)
"""Enough of the recipe to learn where a short function ends (held-out loss about 0.9 against a unigram's 3.0)."""


@pytest.fixture(autouse=True)
def one_thread():
    """Each test on one torch thread: two threads that wait for each other on a shared, busy machine spin (OpenMP),
    and the suite's two workers already fill both cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def write_real_corpus(folder: Path) -> Path:
    for name in REAL_FILES:
        shutil.copy(STDLIB / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def real_corpus(tmp_path_factory) -> Path:
    return write_real_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def ending(tmp_path_factory) -> Path:
    """A folder as $TOKENGEN_TRAINED_DIR names one: the draft preset built in 60 steps on modules of short
    functions, so its rows end at its own EOS at steps of their own."""
    corpus = tmp_path_factory.mktemp("functions")
    for f in range(24):
        body = "".join(f"def step_{f}_{j}(value):\n    return value + {j}\n\n\n" for j in range(40))
        (corpus / f"m{f:02d}.py").write_text("import os\n\n\n" + body)
    path, _ = obtain(DRAFT, ENDING, corpus, tmp_path_factory.mktemp("built"), progress=False)
    carried = tmp_path_factory.mktemp("carried")
    shutil.copytree(path, carried / DRAFT)
    return carried


SOURCE = b'"""A module."""\nimport os\n\n\n@cache\ndef f(x):\n    return x\n\n\nX = 1\n\n\nclass C:\n    def m(self):\n\n        pass\n'


def test_a_module_is_its_top_level_blocks_each_ended_by_eos_and_tests_are_left_out(tmp_path):
    docs = documents.documents(SOURCE)
    assert docs == [
        b'"""A module."""\nimport os\n\n\n',
        b"@cache\ndef f(x):\n\treturn x\n\n\n",  # its decorator with it, indentation a tab per level
        b"X = 1\n\n\n",
        b"class C:\n\tdef m(self):\n\n\t\tpass\n\n\n",  # a blank line inside a block stays
    ]
    assert documents.documents(b"def broken(:\n      pass") == [b"def broken(:\n\t  pass\n\n\n"]  # one document
    ids = documents.stream(docs[:2]).tolist()
    assert ids[0] == ids[-1] == documents.EOS and ids.count(documents.EOS) == 3
    assert bytes(ids[1 : ids.index(documents.EOS, 1)]) == docs[0]
    for name in ("a.py", "pkg/b.py", "test/c.py", "pkg/tests/d.py", "site-packages/e.py", "pkg/f.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    assert [name for name, _ in contract.corpus_files(tmp_path)] == ["a.py", "pkg/b.py"]
    held = [documents.held_out(f"pkg/module_{i}.py", 20) for i in range(2000)]
    assert 0.03 < sum(held) / len(held) < 0.07 and held == [
        documents.held_out(f"pkg/module_{i}.py", 20) for i in range(2000)
    ]


def test_the_key_follows_the_corpus_the_recipe_and_torch(real_corpus, tmp_path, monkeypatch):
    key = contract.build_key(DRAFT, FEW, real_corpus)
    assert key == contract.build_key(DRAFT, FEW, real_corpus) and len(key) == 16
    assert contract.build_key(DRAFT, dataclasses.replace(FEW, steps=4), real_corpus) != key
    assert contract.build_key("tiny-trained", FEW, real_corpus) != key  # another shape
    other = write_real_corpus(tmp_path)
    assert contract.build_key(DRAFT, FEW, other) == key  # the same text elsewhere: the same key
    (other / "abc.py").write_text((other / "abc.py").read_text() + "\n# changed\n")
    assert contract.build_key(DRAFT, FEW, other) != key
    monkeypatch.setattr(contract, "versions", lambda: {"torch": "0.0.1", "transformers": "5.24.0"})
    assert contract.build_key(DRAFT, FEW, real_corpus) != key


def test_two_builds_are_the_same_bytes_whatever_the_callers_seed_and_threads(real_corpus, tmp_path):
    a, figures = obtain(DRAFT, FEW, real_corpus, tmp_path / "a", progress=False)
    torch.manual_seed(1234)
    state = torch.random.get_rng_state()
    torch.set_num_threads(2)  # the recipe's is one: its own for the build, then the caller's again
    b, _ = obtain(DRAFT, FEW, real_corpus, tmp_path / "b", progress=False)
    assert torch.get_num_threads() == 2 and torch.equal(torch.random.get_rng_state(), state)  # both put back
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted([CONFIG, HELDOUT, MANIFEST, WEIGHTS]) == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert contract.checkpoint_facts(a) == {
        "model_heldout_loss": pytest.approx(figures["heldout_loss"]),
        "model_corpus": contract.corpus_digest(real_corpus),
        "model_train_steps": 3,
    }


def test_a_checkpoint_changed_cut_short_or_never_finished_is_built_again_not_loaded(real_corpus, tmp_path):
    path, built = obtain(DRAFT, FEW, real_corpus, tmp_path, progress=False)
    whole = {p.name: p.read_bytes() for p in path.iterdir()}
    assert built and damage(path) is None and obtain(DRAFT, FEW, real_corpus, tmp_path, progress=False)[1] is None
    flipped = bytearray(whole[WEIGHTS])
    flipped[-100] ^= 0xFF  # a byte of a tensor: the header still whole
    damaged = {
        "changed": lambda: (path / WEIGHTS).write_bytes(bytes(flipped)),
        "cut short": lambda: (path / WEIGHTS).write_bytes(whole[WEIGHTS][:5000]),
        "never finished": lambda: (path / MANIFEST).unlink(),
    }
    for how, damage_it in damaged.items():
        damage_it()
        assert damage(path) is not None, how
        if how == "changed":
            assert weights_problem(path) is None  # only the manifest's hash tells
        said: list[str] = []
        again, built = obtain(DRAFT, FEW, real_corpus, tmp_path, say=said.append, progress=False)
        assert built and again == path and "building it again" in said[0], how
        assert {p.name: p.read_bytes() for p in path.iterdir()} == whole, how


def test_a_carried_checkpoint_is_found_first_and_fingerprinted_by_its_files(ending, monkeypatch, tmp_path):
    monkeypatch.setenv("TOKENGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(CARRIED_VARIABLE, raising=False)
    assert contract.find(DRAFT) is None and facts("cpu", 1, DRAFT)["model_files"] == "not built"
    monkeypatch.setenv(CARRIED_VARIABLE, str(ending))
    assert contract.find(DRAFT) == ending / DRAFT
    assert facts("cpu", 1, DRAFT)["model_files"] == model_files_hash(str(ending / DRAFT))
    assert facts("cpu", 1, "tiny")["model_files"] == "preset"
    drafted = f"preset draft {model_files_hash(str(ending / DRAFT))}"
    assert facts("cpu", 1, "tiny", DRAFT)["model_files"] == drafted  # a speculative trial depends on its draft too
    assert draft_for(resolve("kv_cache", model="tiny-trained", speculate="draft4")) == DRAFT
    assert draft_for(resolve("kv_cache", model="tiny-trained", speculate="lookup4")) is None
    broken = tmp_path / "broken"
    shutil.copytree(ending, broken)
    (broken / DRAFT / WEIGHTS).write_bytes((ending / DRAFT / WEIGHTS).read_bytes()[:5000])
    monkeypatch.setenv(CARRIED_VARIABLE, str(broken))
    with pytest.raises(SpecError, match=f"model {DRAFT}: .*carry it again"):  # never other weights built here
        ensure([DRAFT], print)


def test_prompts_are_held_out_text_each_row_its_own_odd_rows_near_a_documents_end():
    from tokengen.decode.prompts import text_prompts

    eos, rows, length, steps = documents.EOS, 10, 12, 20
    text = documents.stream([bytes([65 + d % 26]) * (40 + 7 * d) for d in range(30)])  # documents of one letter
    ends = set(torch.nonzero(torch.from_numpy(text.astype("int64")) == eos).flatten().tolist())

    def draw(seed):
        return text_prompts(text, eos, rows, length, steps, torch.Generator().manual_seed(seed))

    prompts = draw(0)
    assert prompts.shape == (rows, length) and torch.equal(prompts, draw(0)) and not torch.equal(prompts, draw(1))
    for row, prompt in enumerate(prompts.tolist()):
        found = [e for e in range(length, len(text) + 1) if text[e - length : e].tolist() == prompt]
        assert found, "a window of the held-out text"
        if row % 2:
            assert any(0 <= end - e < steps for e in found for end in ends), "its document ends within max_seqlen"
    assert len({tuple(p) for p in prompts.tolist()}) > rows // 2  # rows of their own (one-letter documents repeat)


def test_stop_model_ends_rows_at_the_models_own_eos_and_every_exact_variant_agrees(ending, monkeypatch):
    from tokengen.contract.declarations import names, values
    from tokengen.contract.rules import resolve
    from tokengen.decode.loop import Generator
    from tokengen.engines.hf_generate import hf_generate
    from tokengen.models import build_model

    monkeypatch.setenv(CARRIED_VARIABLE, str(ending))
    model = build_model(DRAFT, "float32", "cpu", 0)  # the preset's loader: the carried checkpoint, checked
    prompt, steps = 16, 48

    def spec(**knobs):
        return resolve(None, model=DRAFT, batch_size=6, prompt_len=prompt, max_seqlen=steps, stop="model", **knobs)

    expected = hf_generate(model, spec(cache="dynamic"))  # transformers' generate(): the peer
    generated = expected[:, prompt:].tolist()
    ends = [row.index(documents.EOS) + 1 if documents.EOS in row else steps for row in generated]
    assert sum(end < steps for end in ends) >= 2 and len(set(ends)) >= 2, ends  # rows end, at steps of their own
    assert len({tuple(row) for row in expected.tolist()}) == 6
    for cache in names("cache"):
        for check in (d for d in values("stop_check") if not d.cuda_only):
            got = Generator(model, spec(cache=cache, stop_check=check.name))()
            width = expected.shape[1]
            assert torch.equal(got.tokens[:, :width], expected), (cache, check.name)
            assert (got.tokens[:, width:] == documents.EOS).all(), (cache, check.name)  # stop_check=none's padding


def test_the_cli_names_the_trained_model_with_its_loss_and_counts_rows_ended(ending, monkeypatch, capsys, tmp_path):
    from tokengen import models
    from tokengen.cli import main

    monkeypatch.setenv(CARRIED_VARIABLE, str(ending))
    monkeypatch.setattr(models, "_said", set())  # as a new process: the checkpoint not yet named
    out = tmp_path / "record.json"
    point = ["--batch-size", "6", "--prompt-len", "16", "--max-seqlen", "48", "--runs", "1", "--warmup", "0"]
    assert main(["--model", DRAFT, "--stop", "model", "--variant", "kv_cache", *point, "--json", str(out)]) == 0
    record = TrialResult.from_json(out.read_text())
    loss = contract.checkpoint_facts(ending / DRAFT)["model_heldout_loss"]
    assert record.model_heldout_loss == loss and record.model_train_steps == ENDING.steps
    assert record.rows_ended >= 2 and record.model_corpus
    printed = capsys.readouterr()
    assert f"{DRAFT} (trained: held-out loss {loss:.3f} nats/byte)" in printed.out
    assert "Rows ended before max_seqlen at their own EOS:" in printed.out
    assert f"model {DRAFT}: trained checkpoint {ending / DRAFT} (held-out loss {loss:.3f}" in printed.err


def test_the_recipe_learns_more_than_byte_counts(ending):
    """A build that learned nothing would sit at the unigram's loss or above (uniform bytes: 5.5 nats)."""
    meta = safetensors_metadata(ending / DRAFT / WEIGHTS)
    assert float(meta["heldout_loss"]) < float(meta["unigram_loss"]) - 1.5, meta


def test_two_builders_at_once_build_once(real_corpus, tmp_path):
    """Two drivers (here two threads, each with its own lock file handle) that want one checkpoint: one builds it,
    the other waits on the lock and finds it whole."""
    import threading

    said: list[str] = []
    results: list = []

    def build() -> None:
        results.append(obtain(DRAFT, FEW, real_corpus, tmp_path, say=said.append, progress=False))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({path for path, _ in results}) == 1 and sorted(built is None for _, built in results) == [False, True]
    assert any("another process is building it; waiting" in line for line in said), said


def test_python_m_tokengen_train_builds_once_and_copies_where_asked(real_corpus, tmp_path, capsys):
    from tokengen.train.__main__ import main

    args = [DRAFT, "--steps", "2", "--corpus", str(real_corpus)]
    assert main([*args, "--out", str(tmp_path / "out")]) == 0
    first = capsys.readouterr().err
    assert f"{DRAFT}: built in " in first and "held-out loss" in first and f"{DRAFT}: copied to" in first
    assert damage(tmp_path / "out" / DRAFT) is None  # a whole checkpoint, to carry
    assert main(args) == 0 and f"{DRAFT}: already built: " in capsys.readouterr().err


def test_ensure_builds_what_is_missing_in_a_process_of_its_own_and_says_so(monkeypatch):
    import tokengen.train as train

    missing = {"tiny-trained", DRAFT}
    ran: list[list[str]] = []

    def run(command, **kwargs):
        ran.append(command)
        assert kwargs["env"]["OMP_WAIT_POLICY"] == "PASSIVE" and kwargs["stdin"] is not None
        missing.clear()
        return type("Done", (), {"returncode": 0})()

    monkeypatch.setattr(train, "find", lambda name: None if name in missing else Path("/built") / name)
    monkeypatch.setattr(train.subprocess, "run", run)
    said: list[str] = []
    train.ensure(["tiny-trained"], said.append)
    assert ran[0][1:] == ["-m", "tokengen.train", "tiny-trained", DRAFT]  # the draft beside it
    assert said == [
        f"model tiny-trained, {DRAFT}: not built on this machine yet, building once (python -m tokengen.train)"
    ]
    train.ensure(["tiny-trained"], said.append)
    assert len(ran) == 1 and len(said) == 1  # found: nothing run, nothing said
    missing.add(DRAFT)
    monkeypatch.setattr(train.subprocess, "run", lambda command, **kwargs: type("Done", (), {"returncode": 1})())
    with pytest.raises(train.SpecError, match=f"model {DRAFT} could not be built"):
        train.ensure([DRAFT], said.append)


def test_trained_weights_are_judged_where_the_references_margin_is_decisive():
    from tokengen.contract.fidelity import MARGIN_FLOOR, RANDOM_WEIGHTS, verdict

    assert verdict("lossy", 0.996, 0.99, "tiny", 3.0) == f"lossy 99.6%, {RANDOM_WEIGHTS}"  # random: never judged
    assert verdict("lossy", 0.996, 0.99, "tiny-trained", 3.0) == "lossy 99.6%"
    assert verdict("lossy", 0.931, 0.99, "tiny-trained", 3.0) == "below gate 93.1%"
    low = MARGIN_FLOOR - 0.5
    assert (
        verdict("lossy", 0.996, 0.99, "tiny-trained", low)
        == f"lossy 99.6%, fidelity only (reference margin {low:.2f} < 1.0)"
    )
    assert verdict("equivalent", 1.0, 0.99, "/a/checkpoint", None) == "equivalent 100.0%"  # a record without margins
