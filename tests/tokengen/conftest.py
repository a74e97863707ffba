"""Fixtures of the tokengen tests."""

from __future__ import annotations

import itertools
import json

import pytest


@pytest.fixture
def tiny_trial(tmp_path):
    """`python -m tokengen`, in this process, on the tiny model at a small point (2 rows, 8 positions, 2 timed
    runs) with the given flags: returns the trial's JSON record."""
    from tokengen.cli import main

    count = itertools.count()

    def run(*flags: str) -> dict:
        path = tmp_path / f"record{next(count)}.json"
        point = ["--model", "tiny", "--batch-size", "2", "--max-seqlen", "8", "--runs", "2"]
        assert main([*point, *flags, "--json", str(path)]) == 0
        return json.loads(path.read_text())

    return run
