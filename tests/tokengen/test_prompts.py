"""The trial's prompts: seeded, distinct per row, the same on every machine, apart from the weights."""

from __future__ import annotations

import torch

from tokengen.decode.prompts import prompt_ids
from tokengen.models import load_config

TINY = load_config("tiny")  # GPT-2: BOS = EOS = 50256, 50257 ids


def test_bos_then_seeded_ids_distinct_per_row():
    prompts = prompt_ids(TINY, 64, 9, seed=0)
    assert prompts.shape == (64, 9) and prompts.dtype == torch.long
    assert (prompts[:, 0] == 50256).all()
    assert prompts[:, 1].unique().numel() == 64  # column 1 alone tells every row apart
    assert 0 <= int(prompts.min()) and int(prompts.max()) < TINY.vocab_size
    assert torch.equal(prompts, prompt_ids(TINY, 64, 9, seed=0))
    assert not torch.equal(prompts, prompt_ids(TINY, 64, 9, seed=1))


def test_the_same_ids_on_every_machine():
    """Pinned: a change here changes every prompted trial's tokens and checksum, so it must be on purpose."""
    assert prompt_ids(TINY, 3, 5, seed=0).tolist() == [
        [50256, 36815, 20136, 30207, 35085],
        [50256, 33637, 25997, 6490, 7939],
        [50256, 43353, 10452, 16013, 47800],
    ]
    assert prompt_ids(load_config("llama-tiny"), 2, 4, seed=1).tolist() == [
        [1, 29226, 28206, 22337],
        [1, 22163, 21752, 22328],
    ]


def test_bos_only_is_the_article_setting():
    assert prompt_ids(TINY, 4, 1, seed=7).tolist() == [[50256]] * 4


def test_drawing_prompts_leaves_the_weights_seed_alone():
    """Weights are built after torch.manual_seed(seed): prompts must not consume that stream."""
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    prompt_ids(TINY, 4, 16, seed=0)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_prompts_are_built_on_the_cpu_and_moved():
    assert prompt_ids(TINY, 2, 4, seed=0, device="meta").device.type == "meta"


def test_prompt_and_steps_may_fill_every_position_and_no_more():
    """The last token is never fed back: P + max_seqlen may be the model's positions + 1. At that
    bound a generation runs (GPT-2's position table would raise one further)."""
    from tokengen.contract.rules import problem, resolve
    from tokengen.decode.loop import Generator
    from tokengen.models import build_model

    at_bound = resolve("kv_cache", model="tiny", batch_size=1, prompt_len=1017, max_seqlen=8)  # 1025 = 1024 + 1
    assert problem(at_bound) is None
    assert Generator(build_model("tiny", "float32", "cpu", 0), at_bound)().tokens.shape == (1, 1025)
    beyond = resolve("kv_cache", model="tiny", batch_size=1, prompt_len=1018, max_seqlen=8)
    assert problem(beyond) == (
        "prompt_len + max_seqlen = 1026 is beyond the model's 1024 positions: "
        "use prompt_len + max_seqlen <= 1025 (the last token is never fed back)"
    )


def test_rows_beyond_the_vocabulary_still_differ_and_the_first_rows_keep_their_ids():
    """B > V: every row its own prompt (a batch of 100,000 rows on a 50,257-id vocabulary), and the draw for
    rows up to V is the one a batch of V makes."""
    rows = 2 * TINY.vocab_size + 5
    prompts = prompt_ids(TINY, rows, 3, seed=0)
    assert prompts.shape == (rows, 3) and (prompts[:, 0] == 50256).all()
    assert torch.unique(prompts, dim=0).shape[0] == rows
    assert 0 <= int(prompts.min()) and int(prompts.max()) < TINY.vocab_size
    assert torch.equal(prompts[: TINY.vocab_size, 1], prompt_ids(TINY, TINY.vocab_size, 3, seed=0)[:, 1])
