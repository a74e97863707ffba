"""plain_rows gives what pandas' to_dict("index") gives: the same labels, columns and Python values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracking.rows import plain_rows


def test_the_rows_are_to_dicts_own():
    frame = pd.DataFrame(
        {
            "variant": ["kv_cache", None, "baseline"],
            "batch_size": [1, 4, 16],
            "runtime_mean_s": [0.5, math.nan, 1.25],
            "ok": [True, False, True],
            "runs": pd.array([8, None, 10], dtype="Int64"),
        },
        index=[7, 3, 9],
    )
    for columns in (None, ["runtime_mean_s", "missing", "variant"], []):
        expected = frame[[c for c in (columns if columns is not None else frame.columns) if c in frame]]
        got, want = plain_rows(frame, columns), expected.to_dict("index")
        assert list(got) == list(want) == [7, 3, 9]
        for label in want:
            assert list(got[label]) == list(want[label])
            for name, value in want[label].items():
                same = (
                    value is got[label][name]
                    or value == got[label][name]
                    or (value != value and got[label][name] != got[label][name])
                )
                assert same and type(got[label][name]) is type(value), (label, name, got[label][name], value)
    assert isinstance(plain_rows(frame)[7]["batch_size"], int) and not isinstance(
        plain_rows(frame)[7]["batch_size"], np.integer
    )
