"""The saved view shows the verdicts first: after the run's name and age come the speedup, its interval, the
tokens verdict and the measurement, narrow enough to fit the room a 1600 px window leaves them (FIRST_PX, measured
in the browser by tests/end_to_end/test_ui_browser.py), whatever the run names' length within reason."""

from __future__ import annotations

import pytest

from tracking.store import view

FIRST = [
    "metrics.`ui/speedup`",
    "metrics.`ui/speedup_low`",
    "metrics.`ui/speedup_high`",
    "tags.`tokens_verdict`",
    "tags.`measurement`",
]


@pytest.mark.parametrize(
    "name", ["baseline b2 p8 L6", "static_cache_every_k b4 p8 L48", "static_compiled b64 p128 L400"]
)
def test_the_verdicts_come_first_and_fit_beside_the_run_name(name):
    state = view.view_state("x", [name])
    assert state["columnOrder"][:2] == [view.NAME, view.CREATED]
    assert state["columnOrder"][2:7] == FIRST and state["selectedColumns"][:5] == FIRST
    widths = state["columnWidths"]
    used = sum(widths[c] for c in [view.NAME, view.CREATED, *FIRST])
    assert used <= view.FIRST_PX
    assert widths["tags.`tokens_verdict`"] >= view.TOKENS_PX[0]
