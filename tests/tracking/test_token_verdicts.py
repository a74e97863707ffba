"""The report's token verdicts: an extra token is a bug unless it is a no-check run's EOS padding."""

from __future__ import annotations

import numpy as np

from tracking.report.figures.token_verdicts import agreed_steps, extra_steps_ok, verdict

BASE = np.array([[50, 1, 2, 3, 9], [50, 4, 5, 9, 9]])  # BOS, 4 steps, EOS-padded


def test_a_lagged_check_that_keeps_its_extra_token_is_a_mismatch():
    kept_extra = np.hstack([BASE, [[7], [7]]])
    assert agreed_steps(kept_extra, BASE) == 4  # the shared prefix alone would say "ok"
    assert not extra_steps_ok(kept_extra, BASE, "deferred")


def test_a_no_check_run_may_pad_with_eos_only():
    padded = np.hstack([BASE, [[9, 9], [9, 9]]])
    assert extra_steps_ok(padded, BASE, "none")
    assert not extra_steps_ok(np.hstack([BASE, [[9, 8], [9, 9]]]), BASE, "none")  # not one padding token
    assert not extra_steps_ok(BASE[:, :4], BASE, "sync")  # shorter is never right


def test_verdicts_by_precision():
    assert verdict("float32", 2, 4) == "MISMATCH (2/4)"
    assert verdict("bfloat16", 2, 4) == "agree 2/4"
    assert verdict("float32", 4, 4) == "ok"


def test_prompt_columns_are_not_counted_as_agreed_steps():
    prompt = np.array([[50, 11, 12], [50, 13, 14]])  # BOS + 2 prompt tokens per row
    base = np.hstack([prompt, [[1, 2, 3], [4, 5, 6]]])
    mine = np.hstack([prompt, [[1, 7, 3], [4, 5, 6]]])
    assert agreed_steps(mine, base, prompt_len=3) == 1  # row 0 differs at its second decode step
    assert agreed_steps(base, base, prompt_len=3) == 3


def test_tf32_float32_is_judged_like_a_lower_precision():
    assert verdict("float32", 2, 4, "high") == "agree 2/4"
    assert verdict("float32", 2, 4, "highest") == "MISMATCH (2/4)"
