"""Requests that arrive over time (tokengen/contract/arrivals.py, tokengen/engines/arrival_clock.py): the schedule is
the seed's, at its rate and burstiness, the same for every variant; the server admits no request before it arrives,
sleeps when it has nothing to do, and still serves each request its own tokens; a trace's prompt and output lengths
are each request's own; bad arrival settings are one line."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from tokengen.contract.arrivals import arrival_problem, draw_times, schedule_for
from tokengen.contract.rules import problem, resolve
from tokengen.contract.slo import Slo
from tokengen.decode.prompts import prompt_ids
from tokengen.engines import make_generator
from tokengen.engines.request_server import request_lengths
from tokengen.measure.load_figures import load_figures
from tokengen.models import build_model, eos_ids

N, SLOTS, P, S = 12, 3, 5, 12


@pytest.fixture(scope="module")
def net():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield build_model("tiny", "float32", "cpu", seed=0)
    torch.set_num_threads(threads)


def spec_for(variant="static_cache", **fields):
    fields = {"batch_size": SLOTS, "requests": N, "prompt_len": P, "max_seqlen": S, "stop": "uniform:1-12", **fields}
    return resolve(variant, model="tiny", **fields)


def test_the_schedule_is_the_seeds_at_its_rate_and_burstiness():
    once = draw_times(4000, 50.0, 1.0, seed=3)
    assert once == draw_times(4000, 50.0, 1.0, seed=3) and once[0] == 0.0
    assert once != draw_times(4000, 50.0, 1.0, seed=4)
    slower = draw_times(4000, 25.0, 1.0, seed=3)  # one schedule at two speeds: a search's probes differ by the rate
    assert slower == pytest.approx([2 * t for t in once])
    gaps = [b - a for a, b in zip(once, once[1:])]
    assert statistics.fmean(gaps) == pytest.approx(1 / 50, rel=0.05)  # 1/sqrt(4000) = 1.6% sd
    assert statistics.stdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.08)  # Poisson: CV 1
    bursty = [b - a for a, b in zip(*(lambda t: (t, t[1:]))(draw_times(4000, 50.0, 0.5, seed=3)))]
    assert statistics.fmean(bursty) == pytest.approx(1 / 50, rel=0.06)
    assert statistics.stdev(bursty) / statistics.fmean(bursty) == pytest.approx(2**0.5, rel=0.08)  # gamma(0.5)
    static, continuous = (
        schedule_for(spec_for(v, request_rate=20.0)) for v in ("static_cache", "static_cache_continuous")
    )
    assert static == continuous and static.offered_rate == pytest.approx((N - 1) / static.times_s[-1])
    assert schedule_for(spec_for()) is None  # offline
    assert spec_for().key() == spec_for(request_rate=0.0, burstiness=1.0, request_trace="").key()


@pytest.mark.parametrize("batching", ["static", "continuous"])
def test_no_request_is_admitted_before_it_arrives_and_each_gets_its_own_tokens(net, batching):
    """Arrivals 40 ms apart on average, far slower than a tiny step: an offline server would admit them all at once."""
    spec = spec_for(batching=batching, request_rate=25.0)
    got = make_generator(net, spec)()
    offline = make_generator(net, spec_for(batching=batching))()
    assert torch.equal(got.tokens, offline.tokens)  # tests/tokengen/test_serving.py: offline = each solo generate()
    for r in range(N):
        admitted = got.entered_s[got.admitted_at[r]]
        assert got.arrivals_s[r] <= got.registered_s[r] <= admitted, r
        assert got.held_s[got.admitted_at[r]] >= admitted
    assert got.admitted_at == sorted(got.admitted_at)  # in arrival order
    assert got.latencies_s[-1] >= got.arrivals_s[-1]


def test_transformers_continuous_batching_takes_each_request_as_it_arrives(net):
    """The peer (engine=generate_batch) under the same schedule: each request added once it has arrived, its tokens
    the offline run's (each its solo generate()'s: tests/tokengen/test_serving.py), its token times its own."""
    spec = spec_for("hf_generate_batch", request_rate=25.0, stop="uniform:2-12")
    got = make_generator(net, spec)()
    offline = make_generator(net, spec_for("hf_generate_batch", stop="uniform:2-12"))()
    assert torch.equal(got.tokens, offline.tokens)
    assert got.arrivals_s == list(schedule_for(spec).times_s) and offline.arrivals_s == [0.0] * N
    lengths = [int(n) for n in request_lengths(spec, got.tokens, eos_ids(net.config))]
    for r in range(N):
        times = got.token_times_s[r]
        assert got.arrivals_s[r] <= got.registered_s[r] <= times[0], r  # no token before its request was added
        assert len(times) == lengths[r] and times == sorted(times) and times[-1] <= got.latencies_s[r], r
    figures = load_figures([got], lengths, Slo(ttft_ms=60_000, tpot_ms=60_000))
    assert figures["request_queue_p50_s"] is None  # the manager's own queue is not measured
    behind = figures["serving_note"].startswith("falling behind")  # six measured requests: a busy machine can say so
    assert figures["slo_met"] is not behind  # every latency within 60 s: met exactly where the server kept up
    assert 0 < figures["request_ttft_p50_s"] <= figures["request_e2e_p99_s"]
    assert figures["offered_rate_rps"] > 0 and figures["arrival_error_p99_s"] >= 0


def test_a_server_with_nothing_to_do_sleeps(net):
    """Three requests over 2.5 s (the seed's draw at 0.5 requests/s): the run's CPU time is a small part of its wall."""
    server = make_generator(net, spec_for("static_cache_continuous", requests=3, request_rate=0.5, stop="fixed:2"))
    wall, cpu = time.perf_counter(), time.process_time()
    got = server()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert wall >= got.arrivals_s[-1] > 2.0
    assert cpu < 0.25 * wall, (cpu, wall)


def test_a_traces_prompt_and_output_lengths_are_each_requests_own(net, tmp_path):
    rows = [(0.0, 5, 3), (0.01, 2, 7), (0.01, 4, 1), (0.05, 1, 12), (0.06, 3, 4), (0.2, 5, 2), (0.21, 2, 5)]
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n" + "".join(f"{t},{p},{o}\n" for t, p, o in rows))
    prompts = prompt_ids(net.config, len(rows), P, seed=0)
    pad = eos_ids(net.config)[0]
    for batching in ("static", "continuous"):
        spec = spec_for(requests=len(rows), stop="never", request_trace=str(trace), batching=batching)
        assert problem(spec) is None
        got = make_generator(net, spec)()
        for i, (_, length, output) in enumerate(rows):
            if output > 1:  # its tokens before the trace's length forces EOS
                alone = net.generate(
                    prompts[i : i + 1, :length],
                    do_sample=False,
                    max_new_tokens=output - 1,
                    eos_token_id=[],
                    pad_token_id=0,
                )[0, length:]
                assert torch.equal(got.tokens[i, P : P + output - 1], alone), (batching, i)
            assert (got.tokens[i, P + output - 1 :] == pad).all() and (got.tokens[i, length:P] == pad).all()


@pytest.mark.parametrize(
    "fields, line",
    [
        ({"request_rate": -1.0}, "request_rate=-1.0: give requests per second above 0, or 0 for offline"),
        ({"burstiness": 0.0}, "burstiness=0.0: give a gamma shape above 0 (1: Poisson arrivals, below 1 burstier)"),
        ({"request_rate": 5.0, "requests": 0}, "request_rate sets when requests arrive: set requests=N (N > 0)"),
        ({"request_trace": "trace.csv"}, "request_trace=trace.csv: give an absolute path"),
    ],
)
def test_bad_arrival_settings_are_one_line(fields, line):
    fields = {"stop": "never", **fields}
    assert problem(spec_for(fields.pop("variant", "static_cache"), **fields)).startswith(line)


def test_transformers_continuous_batching_replays_no_trace_and_says_what_to_use(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("0,5,3\n0.1,5,2\n")
    said = problem(spec_for("hf_generate_batch", requests=2, stop="never", request_trace=str(trace)))
    assert said.startswith("engine=generate_batch replays no request_trace here") and "use request_rate" in said


@pytest.mark.parametrize(
    "text, line",
    [
        ("0,5,3\n0.1,five,2\n", "row 2 is '0.1,five,2': give a CSV of numbers, one request a row"),
        ("0,5\n", "row 1 is '0,5': give a CSV of numbers"),
        ("\x00\xff\xfe", "is not a CSV file"),
        ("0.5,2,2\n0.1,2,2\n", "row 2: arrival times must not decrease"),
        ("0,2.5,2\n", "row 1: prompt and output lengths are whole numbers >= 1"),
        ("0,9,2\n", "has prompts of 9 ids: use prompt_len >= 9"),
    ],
)
def test_a_trace_that_is_not_a_csv_of_numbers_is_one_line(tmp_path, text, line):
    trace = tmp_path / "trace.csv"
    trace.write_bytes(text.encode("latin-1"))
    said = arrival_problem(spec_for(requests=1, stop="never", request_trace=str(trace)))
    assert line in said and "\n" not in said, said


def test_a_load_trial_records_its_figures_under_the_slo_it_was_handed(monkeypatch):
    """The sweep hands its SLO through the trial process's environment (sweeps/execution/trial_process.py)."""
    from tokengen.contract.slo import SLO_ENV, Slo
    from tokengen.measure.trial import run_trial

    monkeypatch.setenv(SLO_ENV, Slo(ttft_ms=5000, tpot_ms=1000, percentile=90).to_env())
    record = run_trial(spec_for("static_cache_continuous", request_rate=10.0, stop="fixed:4", warmup=0, runs=1))
    assert (record["slo_ttft_s"], record["slo_tpot_s"], record["slo_percentile"]) == (5.0, 1.0, 90.0)
    assert record["requests_measured"] == N - 2 * SLOTS and record["slo_met"] is True
    times = schedule_for(spec_for(request_rate=10.0)).times_s[SLOTS : N - SLOTS]  # the measured requests' arrivals
    assert record["offered_rate_rps"] == pytest.approx((len(times) - 1) / (times[-1] - times[0]))
    assert 0 < record["request_ttft_p50_s"] <= record["request_ttft_p99_s"] <= record["request_e2e_p99_s"]
    assert record["goodput_rps"] == pytest.approx(record["achieved_rate_rps"])  # every request within 5 s
    assert record["serving_note"].endswith(f"p99 of {N - 2 * SLOTS} requests (< 100) is their maximum")
    from tokengen.terminal_table import render

    assert "SLO (p90 TTFT <= 5000 ms, TPOT <= 1000 ms): met" in render(record)  # python -m tokengen's table
    few = render({**record, "achieved_rate_rps": None, "goodput_rps": None})  # two requests done out of order
    assert "achieved n/a, goodput n/a req/s" in few


@pytest.mark.parametrize(
    "reads_behind, waits_at, held",
    [
        (0, [0, 1, 2, 3], [1, 2, 3, 4]),  # sync: each step's wait holds its own tokens
        (1, [0, 1, 2, 3], [2, 3, 4, 5]),  # deferred, pipelined: a wait reads the step before, the last at the end
        (0, [3], [4, 4, 4, 4]),  # every_k: one wait after the 4th step holds all four
    ],
    ids=["sync", "lagged", "every_k"],
)
def test_the_host_holds_a_steps_tokens_at_the_first_wait_that_covers_it(monkeypatch, reads_behind, waits_at, held):
    """A segment of four steps; the wait after step i returns at time i + 1 and the segment ends at 5 (the host reads
    the finished mask), so each held time names the wait that covered the step."""
    from tokengen.decode.ranges import NO_RANGES
    from tokengen.engines import host_times

    now = [0.0]
    monkeypatch.setattr(host_times.time, "perf_counter", lambda: now[0])
    times = host_times.HostTimes(NO_RANGES, reads_behind, origin=0.0)
    for i in range(4):
        with times.step(i):
            if i in waits_at:
                with times.check():
                    now[0] = i + 1.0
    now[0] = 5.0
    times.end_segment(4)
    assert times.held_s == held
