"""Per-request figures from arrival (tokengen/measure/load_figures.py): the percentile rule, each request's queueing
delay, TTFT, TPOT, ITL and E2E from the host's clock, warm-up and drain left out, offered and achieved rates,
goodput and the SLO's verdict, worked by hand on a run of five requests."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy
import pytest

from tokengen.contract.slo import Slo, slo_problem
from tokengen.measure.load_figures import load_figures, measured_window, percentile, request_times


@pytest.mark.parametrize("q", [50, 90, 99])
def test_a_resolved_percentile_is_numpys_linear_one(q):
    values = [random.Random(q).lognormvariate(0, 1) for _ in range(200)]
    assert percentile(values, q) == pytest.approx(float(numpy.percentile(values, q)))


def test_a_percentile_too_few_samples_resolve_is_their_maximum():
    assert percentile(list(range(99)), 99) == 98  # numpy would say 97.02
    assert percentile(list(range(100)), 99) == pytest.approx(98.01)
    assert percentile(list(range(9)), 90) == 8 and percentile(list(range(10)), 90) == pytest.approx(8.1)
    assert percentile([3.0], 50) == 3.0 and percentile([], 50) is None


def run_of_five():
    """One slot, five requests, one second apart; the first and the last (warm-up, drain) are left out. Request 1
    waits 0.2 s, then three tokens 0.1 s apart; request 2 waits 0.5 s for its one token; request 3 two tokens."""
    entered = [0.0, 0.1, 1.2, 1.3, 1.4, 2.5, 3.1, 3.2, 4.0, 4.1]  # (F,) the host begins each forward
    return SimpleNamespace(
        slots=1,
        arrivals_s=[0.0, 1.0, 2.0, 3.0, 4.0],
        registered_s=[0.0, 1.0001, 2.0002, 3.0003, 4.0004],
        admitted_at=[0, 2, 5, 6, 8],
        entered_s=entered,
        held_s=[t + 0.05 for t in entered],  # the host holds each forward's tokens 50 ms after it began
        token_times_s=[],  # our server's: its tokens are read off its forwards
    )


LENGTHS = [2, 3, 1, 2, 2]


def test_each_requests_figures_from_its_arrival():
    times = request_times(run_of_five(), LENGTHS, Slo(ttft_ms=300, tpot_ms=150, percentile=50))
    assert list(measured_window(5, 1)) == [1, 2, 3] and times.measured == 3
    assert times.queue == pytest.approx([0.2, 0.5, 0.1])
    assert times.ttft == pytest.approx([0.25, 0.55, 0.15])
    assert times.e2e == pytest.approx([0.45, 0.55, 0.25])
    assert times.tpot == pytest.approx([0.1, 0.1])  # the one-token request has none
    assert times.itl == pytest.approx([0.1, 0.1, 0.1])
    assert times.good == 2  # request 2's TTFT is over 300 ms
    assert times.offered_rate == pytest.approx(2 / 2.0)
    assert times.achieved_rate == pytest.approx(2 / (3.25 - 1.45))
    assert times.output_tokens_per_s == pytest.approx(10 / 4.15)


def test_goodput_and_the_slo_verdict():
    at_median = load_figures([run_of_five()] * 2, LENGTHS, Slo(ttft_ms=300, tpot_ms=150, percentile=50))
    assert at_median["goodput_rps"] == pytest.approx(2 / 1.8 * 2 / 3)
    assert at_median["slo_met"] is True  # median TTFT 0.25 s, TPOT 0.1 s
    assert at_median["request_ttft_p50_s"] == pytest.approx(0.25)
    assert at_median["request_ttft_p99_s"] == pytest.approx(0.55)  # three requests: the p99 is their maximum
    assert at_median["request_queue_mean_s"] == pytest.approx(0.8 / 3)
    assert at_median["arrival_error_p99_s"] == pytest.approx(0.0004)
    assert at_median["serving_note"] == "p99 of 3 requests (< 100) is their maximum"
    at_p99 = load_figures([run_of_five()], LENGTHS, Slo(ttft_ms=300, tpot_ms=150, percentile=99))
    assert at_p99["slo_met"] is False and at_p99["slo_percentile"] == 99.0 and at_p99["slo_ttft_s"] == 0.3


def test_completions_slower_than_arrivals_are_said_to_fall_behind():
    run = run_of_five()
    run.entered_s = [0.0, 0.1, 2.0, 2.1, 2.2, 4.0, 6.0, 6.1, 8.0, 8.1]  # each request starts later than the last
    run.held_s = [t + 0.05 for t in run.entered_s]
    figures = load_figures([run], LENGTHS, Slo())
    assert figures["achieved_rate_rps"] < figures["offered_rate_rps"] == pytest.approx(1.0)
    assert figures["serving_note"].startswith("falling behind: achieved 0.513 req/s of 1 offered")
    lenient = load_figures([run], LENGTHS, Slo(ttft_ms=60_000, tpot_ms=60_000))  # every latency within its limit
    assert lenient["slo_met"] is False and lenient["goodput_rps"] == pytest.approx(lenient["achieved_rate_rps"])


def test_bad_slo_settings_are_one_line():
    assert slo_problem(2000, 100, 101).startswith("sweep.slo_percentile=101: give the percentile of requests")
    assert slo_problem(-1, 100, 99).startswith("sweep.slo_ttft_ms=-1: give a limit in milliseconds above 0")
    assert slo_problem(2000.0, 100.0, 99.0) is None


def one_token_requests(arrivals: list[float], done: list[float]) -> SimpleNamespace:
    """One slot, each request a single token held at `done`: its prefill began 10 ms before."""
    return SimpleNamespace(
        slots=1,
        arrivals_s=arrivals,
        registered_s=arrivals,
        admitted_at=list(range(len(arrivals))),
        entered_s=[t - 0.01 for t in done],
        held_s=done,
        token_times_s=[],
    )


def test_a_server_that_keeps_pace_achieves_the_offered_rate_whatever_its_first_and_last_requests_wait():
    """The measured window's first request waits 50 ms and its last one a second: their completions span 8% more
    than their arrivals, yet the server keeps pace; one that serves 6 of 10 requests/s falls behind."""
    draws = random.Random(0)
    arrivals = [i / 10 for i in range(102)]
    waits = [0.05 if i == 1 else 1.0 if i == 100 else draws.uniform(0.05, 1.0) for i in range(102)]
    kept = load_figures([one_token_requests(arrivals, [a + w for a, w in zip(arrivals, waits)])], [1] * 102, Slo())
    assert kept["offered_rate_rps"] == pytest.approx(10.0)
    assert kept["achieved_rate_rps"] == pytest.approx(10.0, rel=0.03)
    assert "falling behind" not in kept["serving_note"]
    behind = load_figures([one_token_requests(arrivals, [0.1 + i / 6 for i in range(102)])], [1] * 102, Slo())
    assert behind["achieved_rate_rps"] == pytest.approx(6.0)
    assert behind["serving_note"] == "falling behind: achieved 6 req/s of 10 offered"
