"""End to end: a peak search on a real local Ray. The driver's test hook (SWEEPS_TEST_PEAK_RPS) makes a probe meet the
SLO up to 12.5 rps, so the bisection's path is certain on a busy machine: 8 and 16 rps, then 11.31 and 13.45, where
13.45 / 11.31 is within the precision 0.25. Every probe is a child run of the sweep's run, tagged with its
search and number; the report's peak-search table gives the figure and the probes. The same search asked to 0.1
reuses the four finished probes and runs one more (12.33)."""

from __future__ import annotations

import pytest
from sweep_helpers import child_runs, small_sweep

from sweeps.driver import run_sweep
from sweeps.execution.peak_rounds import TEST_PEAK

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("warm_ray")]


def search_sweep(tmp_path, precision: float):
    return small_sweep(
        tmp_path,
        "grid.variant=[static_cache]",
        "trial.requests=6",
        "trial.runs=1",
        "sweep.peak_low_rps=8",
        "sweep.peak_high_rps=16",
        f"sweep.peak_precision={precision}",
    )


def probes(uri: str) -> list[tuple[int, float, str]]:
    """(probe number, rate, search) of every child run, in probe order."""
    runs = child_runs(uri)
    found = [
        (int(r.data.tags["peak_probe"]), float(r.data.params["request_rate"]), r.data.tags["peak_search"]) for r in runs
    ]
    return sorted(found)


def test_a_peak_search_bisects_to_its_precision_records_its_probes_and_resumes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(TEST_PEAK, "12.5")
    config = search_sweep(tmp_path, 0.25)
    uri = config.tracking.uri
    assert run_sweep(config) == 0
    err = capsys.readouterr().err
    found = probes(uri)
    assert [(n, rate) for n, rate, _ in found] == [(1, 8), (2, 16), (3, 11.31), (4, 13.45)]
    assert len({search for *_, search in found}) == 1
    assert "peak search round 3: 1 probe(s), 1 to run" in err
    assert "11.31 rps (the SLO fails by 13.45 rps: within 18.9%), 4 probe(s)" in err, err[-2000:]
    parents = {r.data.tags["mlflow.parentRunId"] for r in child_runs(uri)}
    assert len(parents) == 1  # every probe a child of the search's sweep run

    report = (tmp_path / "reports" / "t" / "report.md").read_text()
    table = report.split("## Serving under load: the peak search")[1].split("\n## ")[0]
    row = next(line for line in table.splitlines() if line.startswith("| static_cache |"))
    assert "| 11.31 | 13.45 | 18.9% | 4 |" in row and "8 met, 16 failed, 11.31 met, 13.45 failed" in row

    assert run_sweep(search_sweep(tmp_path, 0.1)) == 0
    err = capsys.readouterr().err
    assert "resume: skipping 2 trial(s)" in err and "peak search round 2: 1 probe(s), 0 to run" in err
    assert "peak search round 4: 1 probe(s), 1 to run" in err
    assert [(n, rate) for n, rate, _ in probes(uri)][-1] == (5, 12.33)
    assert "12.33 rps (the SLO fails by 13.45 rps: within 9.1%), 5 probe(s)" in err, err[-2000:]
