"""The peak-search table (tracking/report/peak_search_tables.py) from a frame of probes: per search its figure, the
rate that failed above it, every probe in the order it ran, and requests within the SLO per dollar per GPU type."""

from __future__ import annotations

import pandas as pd
import pytest

from tracking.report.comparison import REPORT_MATCH
from tracking.report.peak_search_tables import search_table

POINT = {c: 1 for c in REPORT_MATCH} | {"burstiness": 1.0, "request_trace": "", "variant_rank": 0}


def probe(search, number, rate, met, gpu, price, status="finished", goodput=None):
    return POINT | {
        "peak_search": search,
        "peak_probe": number,
        "request_rate": rate,
        "slo_met": met,
        "status": status,
        "variant": "static_cache_continuous",
        "gpu_type": gpu,
        "price_per_hour": price,
        "goodput_rps": goodput if goodput is not None else rate * 0.98,
        "offered_rate_rps": rate * 1.01,
        "requests": 116,
        "in_sweep": True,
    }


def test_each_search_gives_its_figure_its_probes_and_requests_per_dollar_per_gpu_type():
    rows = [
        probe("a", 2, 400.0, 0.0, "H100", 4.76),
        probe("a", 1, 10.0, 1.0, "H100", 4.76),
        probe("a", 3, 63.25, 1.0, "H100", 4.76, goodput=60.0),
        probe("a", 4, 159.1, 0.0, "H100", 4.76),
        probe("b", 1, 10.0, 1.0, "L40S", 1.86),
        probe("b", 2, 400.0, 0.0, "L40S", 1.86),
        probe("b", 3, 63.25, 0.0, "L40S", 1.86, status="failed"),  # a probe that did not run: no verdict
    ]
    table = search_table(pd.DataFrame(rows)).set_index("search")
    assert table.loc["a", "probed"] == "10 met, 400 failed, 63.25 met, 159.1 failed"  # in the order they ran
    assert (table.loc["a", "peak_rps"], table.loc["a", "fails_at_rps"], table.loc["a", "probes"]) == (63.25, 159.1, 4)
    assert table.loc["a", "within"] == pytest.approx(159.1 / 63.25 - 1)
    assert table.loc["a", "requests_per_usd"] == pytest.approx(60.0 * 3600 / 4.76)
    assert table.loc["b", "gpu_type"] == "L40S" and table.loc["b", "peak_rps"] == 10.0
    assert table.loc["b", "probed"].endswith("63.25 no verdict")
    assert table.loc["b", "requests_per_usd"] == pytest.approx(9.8 * 3600 / 1.86)


def test_a_sweep_without_a_search_has_no_table():
    assert search_table(pd.DataFrame([{"variant": "kv_cache", "status": "finished"}])) is None
