"""The report's load tables and plots (tracking/report/load_tables.py, load_plots.py), from records written through
the sweep's Recorder and read back as a report reads a sweep: goodput against the SLO per trial, the highest rate
meeting it per variant, a latency-throughput plot and a Pareto plot per load curve; the figures as MLflow metrics."""

from __future__ import annotations

import pytest
from servers import seeded_uri

from tokengen.contract.rules import resolve
from tokengen.contract.trial_record import make_record
from tracking.report import comparison
from tracking.report.load_plots import frontier, latency_vs_rate, pareto
from tracking.report.load_tables import goodput_table, peak_table, slo_text
from tracking.store.reading import load_sweep
from tracking.store.recorder import Recorder


def figures(rate: float, capacity: float) -> dict:
    """A server of `capacity` requests/s loaded at `rate`: latency grows as the load nears it, past it it falls behind."""
    load = min(rate / capacity, 0.99)
    achieved = min(rate, capacity)
    ttft, tpot = 0.05 / (1 - load), 0.01 / (1 - load) ** 0.5
    return dict(
        offered_rate_rps=rate,
        achieved_rate_rps=achieved,
        request_ttft_p50_s=ttft,
        request_ttft_p99_s=3 * ttft,
        request_tpot_p50_s=tpot,
        request_tpot_p99_s=2 * tpot,
        output_tokens_per_s=30 * achieved,
        goodput_rps=achieved if 3 * ttft <= 2.0 and 2 * tpot <= 0.1 else achieved / 2,
        slo_met=3 * ttft <= 2.0 and 2 * tpot <= 0.1,
        slo_ttft_s=2.0,
        slo_tpot_s=0.1,
        slo_percentile=99.0,
        requests_measured=100,
        serving_note="" if rate <= capacity else f"falling behind: achieved {achieved:.3g} req/s of {rate:.3g} offered",
    )


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    uri = seeded_uri(tmp_path_factory.mktemp("load"))
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("load", {}, resume=False)
    for variant, capacity in (("static_cache", 10.0), ("static_cache_continuous", 25.0)):
        for burstiness in (1.0, 0.5):
            for rate in (5.0, 10.0, 20.0, 40.0):
                spec = resolve(
                    variant, model="tiny", requests=116, batch_size=8, request_rate=rate, burstiness=burstiness, runs=2
                )
                record = make_record(spec, key=spec.key(), steps=50, runtime_mean_s=5.0, **figures(rate, capacity))
                recorder.record_trial(record)
    noisy = resolve("static_cache", model="tiny", requests=116, batch_size=8, request_rate=2.5, runs=2)
    spoiled = {**figures(2.5, 10.0), "slo_met": False}  # below a rate that met the SLO: a machine others shared
    recorder.record_trial(make_record(noisy, key=noisy.key(), steps=50, runtime_mean_s=5.0, **spoiled))
    offline = resolve("static_cache", model="tiny", requests=116, batch_size=8)
    recorder.record_trial(make_record(offline, key=offline.key(), steps=50, runtime_mean_s=1.0, **figures(1, 10)))
    runs = load_sweep(uri, "tokengen", "load")
    metrics = runs.client.get_run(runs.trials["run_id"].iloc[0]).data.metrics
    assert {"goodput_rps", "slo_met", "request_ttft_p99_s", "achieved_rate_rps"} <= set(metrics)
    return comparison.prepare(runs.trials, None, runs.client, {})[0]


def test_the_goodput_table_has_every_load_trial_and_its_verdict(frame):
    table = goodput_table(frame)
    assert len(table) == 17  # the offline trial is no load trial
    assert table["curve"].unique().tolist() == ["burstiness=0.5", "burstiness=1.0"]
    rows = table[(table["variant"] == "static_cache") & (table["curve"] == "burstiness=1.0")]
    assert rows["request_rate"].tolist() == [2.5, 5.0, 10.0, 20.0, 40.0]
    assert rows["slo_met"].tolist() == ["no", "yes", "no", "no", "no"]  # at its capacity, p99 TTFT is 15 s
    assert rows["serving_note"].iloc[-1].startswith("falling behind")
    assert slo_text(frame) == "p99 TTFT <= 2000 ms and p99 TPOT <= 100 ms"


def test_the_peak_table_gives_each_variant_its_highest_rate_meeting_the_slo(frame):
    table = peak_table(frame).set_index(["curve", "variant"])
    assert table.loc[("burstiness=1.0", "static_cache"), "highest_rate_meeting_slo"] == 5.0
    assert table.loc[("burstiness=1.0", "static_cache"), "lowest_rate_failing_above"] == 10.0
    assert table.loc[("burstiness=1.0", "static_cache"), "failed_below"] == 1  # the spoiled 2.5 requests/s
    assert table.loc[("burstiness=1.0", "static_cache_continuous"), "failed_below"] == 0
    assert table.loc[("burstiness=1.0", "static_cache_continuous"), "highest_rate_meeting_slo"] == 20.0
    assert table.loc[("burstiness=1.0", "static_cache_continuous"), "goodput_there_rps"] == 20.0


def test_the_plots_are_drawn_per_load_curve(frame, tmp_path):
    assert latency_vs_rate(frame, tmp_path).stat().st_size > 10_000
    assert pareto(frame, tmp_path).stat().st_size > 10_000
    assert latency_vs_rate(frame[frame["request_rate"] == 0], tmp_path) is None


def test_the_frontier_keeps_the_points_no_other_beats_on_both():
    points = [(1, 10), (2, 9), (2, 5), (3, 9), (4, 1), (0.5, 8)]
    assert frontier(points) == [(1, 10), (3, 9), (4, 1)]
