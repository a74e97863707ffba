"""Two real CPU sweeps of the same small grid, one with 1 thread per trial and one with 2, compared by
`python -m tracking.compare`: the thread count is named first, the matched point gets its ratio,
interval and verdict, and the two returned the same tokens, recorded as one run whose page the UI's link opens.
One trial per sweep: the synthetic pairs (tests/tracking/test_compare.py) cover many points; this proves the command
on what a real sweep records."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from compare_helpers import recorded_comparison
from sweep_helpers import run_captured, small_sweep

from tracking.compare.__main__ import main
from tracking.compare.points import VERDICTS

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("warm_ray")]  # two sweeps on the session's warm Ray


def test_two_sweeps_that_differ_in_threads(tmp_path, capsys):
    for name, cpus in (("t1", 1), ("t2", 2)):
        status, _, err = run_captured(
            small_sweep(tmp_path, f"sweep.cpus_per_trial={cpus}", "grid.variant=[baseline]", name=name), tmp_path
        )
        assert status == 0, err[-2000:]
    capsys.readouterr()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert main(["t1", "t2", "--uri", uri, "--out", str(tmp_path / "reports")]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "What differs: threads 1 vs 2; sweep.cpus_per_trial 1 vs 2.", out[:500]
    rows = pd.read_csv(tmp_path / "reports" / "t1-vs-t2" / "comparison.csv")
    assert list(rows["variant"]) == ["baseline"] and rows["runs_a"].tolist() == rows["runs_b"].tolist() == [2]
    for _, row in rows.iterrows():
        assert row["ratio_low"] <= row["ratio"] <= row["ratio_high"] and math.isfinite(row["ratio"])
        assert row["verdict"] in VERDICTS[:3] and row["tokens"] == "same"
    run = recorded_comparison(uri, "t1 vs t2")
    assert (
        f"ui: this comparison: http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
        in err
    )
