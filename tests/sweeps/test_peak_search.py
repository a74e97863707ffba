"""The peak search's bisection, its bound, its settings and its plan (sweeps/planning/peak_search.py): pure, no Ray."""

from __future__ import annotations

import math

import pytest
from pricing_helpers import CPU
from sweep_helpers import small_sweep

from sweeps.planning.grid import plan_sweep
from sweeps.planning.peak_search import Search, middles, search_problem
from sweeps.pricing.price import price_sweep
from tokengen.contract.spec import SpecError


def searched(peak: float, low: float = 4, high: float = 64, precision: float = 0.25) -> Search:
    """A search run to its end against a server that meets the SLO up to `peak` rps."""
    search = Search("s", low, high, precision)
    for _ in range(50):
        rates = search.next_rates()
        if not rates:
            return search
        for rate in rates:
            search.verdicts[rate] = rate <= peak
    raise AssertionError("the search never ended")


@pytest.mark.parametrize("peak", [4.0, 4.3, 7.7, 12.5, 31.0, 63.9])
def test_the_search_brackets_the_peak_to_its_precision_within_its_bound(peak):
    search = searched(peak)
    assert search.met <= peak < search.failing
    assert search.failing <= search.met * 1.25 * (1 + 1e-3)  # rates are rounded to four significant digits
    assert len(search.verdicts) <= search.bound == 2 + middles(4, 64, 0.25) == 6


def test_a_range_without_its_peak_ends_after_its_two_ends_and_says_where():
    below, above = searched(3.0), searched(100.0)
    assert len(below.verdicts) == len(above.verdicts) == 2
    assert below.met is None and below.outcome() == "below the range: 4 rps failed the SLO"
    assert above.failing is None and above.outcome() == "at or above the range: 64 rps met the SLO"
    assert searched(12.5).outcome().startswith("11.31 rps (the SLO fails by 13.45 rps")


def test_a_noisy_verdict_below_a_met_rate_never_moves_the_figure_above_a_failure():
    search = Search("s", 4, 64, 0.25, {4: True, 64: False, 16: False, 8: False, 11.31: True})
    assert search.met == 4 and search.failing == 8


def test_the_bound_is_the_bisections_to_the_precision():
    assert middles(4, 64, 0.25) == math.ceil(math.log2(math.log(16) / math.log(1.25)))
    assert middles(10, 10.5, 0.1) == 0


@pytest.mark.parametrize(
    "low, high, precision, fix",
    [
        (5, None, 0.1, "set both"),
        (-1, 5, 0.1, "sweep.peak_low_rps=-1: give a number above 0"),
        (5, 5, 0.1, "is not below sweep.peak_high_rps=5"),
        (5, 50, 1.5, "sweep.peak_precision=1.5: give a fraction below 1"),
        (5, 50, 0, "sweep.peak_precision=0: give a number above 0"),
    ],
)
def test_bad_search_settings_are_one_line_naming_the_fix(low, high, precision, fix):
    assert fix in search_problem(low, high, precision)
    assert search_problem(None, None, 0.1) is None


def load_sweep(tmp_path, *overrides):
    return small_sweep(
        tmp_path,
        "grid.variant=[static_cache]",
        "trial.requests=6",
        "sweep.peak_low_rps=4",
        "sweep.peak_high_rps=64",
        "sweep.peak_precision=0.25",
        *overrides,
    )


def test_the_plan_runs_both_ends_first_and_prices_the_slowest_path(tmp_path):
    plan = plan_sweep(load_sweep(tmp_path))
    assert [t.spec.request_rate for t in plan.trials] == [4, 64]
    assert {t.search for t in plan.trials} == {plan.trials[0].search} and [t.probe for t in plan.trials] == [1, 2]
    assert [t.spec.request_rate for t in plan.later] == [16, 8, 5.657, 4.757]  # every middle failing: lowest rates
    assert [t.probe for t in plan.later] == [3, 4, 5, 6]
    assert len({t.key for t in plan.trials + plan.later}) == 6


@pytest.mark.parametrize(
    "overrides, fix",
    [
        (["+grid.request_rate=[5]"], "drop grid.request_rate"),
        (["trial.requests=0"], "set trial.requests"),
        (["sweep.peak_high_rps=2"], "is not below sweep.peak_high_rps=2"),
    ],
)
def test_a_point_the_search_cannot_serve_is_refused_in_one_line(tmp_path, overrides, fix):
    with pytest.raises(SpecError, match=fix):
        plan_sweep(load_sweep(tmp_path, *overrides))


def test_a_dry_run_prices_the_search_at_its_maximum_and_a_real_run_keeps_those_probes_priced(tmp_path):
    config = load_sweep(tmp_path)
    priced = price_sweep(config, cpu=CPU)
    assert len(priced.runs) == 6  # both ends and the four middles of the slowest path
    assert any(note.startswith("peak search: 1 search(es), each priced at its most, 6 probes") for note in priced.notes)
    later = {t.key for t in priced.plan.later}
    running = priced.running(priced.plan.trials)  # the driver's first round: the later probes may still run
    assert len(running.runs) == 6 and later <= set(running.runs["key"])
    lowest = running.runs.set_index("key")["estimated_s"]
    assert lowest[priced.plan.trials[0].key] >= lowest[priced.plan.trials[1].key]  # 4 rps spans longer than 64
