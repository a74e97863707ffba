"""How close does a dry run's price come to what the sweep then takes?

In a fresh directory with a fresh SQLite store, exactly as a user would (`python -m sweeps.run`):

1. the dry run of the target grid on the empty store (the cost model's prior alone);
2. `+grid=smoke` for real, so the store holds one smoke sweep's history;
3. the dry run of the target grid again, now fitted to that history;
4. the target grid for real.

The target is the smoke grid at `grid.max_seqlen=[8,48,96]` with `sweep.resume=false` (so no trial is
reused by key and 96 steps is a length the history never ran). Each dry run's estimate is the sum of
`estimated_s` in its reports/<sweep>/plan.csv; the real run's figure is what its trials held their
worker (the sum of node_finished_at - node_started_at, what estimated_s predicts), beside the sum of
their `trial_wall_s` (the trials' own clocks). Targets: within 25% with the history, within a factor of 3 without. Then the dry run
of `+grid=full` on L40S: its device-hours, cost and how long it took to plan. The last line is JSON.

    python benchmarks/dry_run_accuracy.py [extra Hydra overrides for every smoke run]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
TARGET = ("+grid=smoke", "grid.max_seqlen=[8,48,96]", "sweep.resume=false")


def sweep(tmp: Path, name: str, *overrides: str, extra: bool = True) -> tuple[str, float]:
    """One `python -m sweeps.run` in tmp (with the command line's overrides where `extra`); what it printed
    (stdout, then stderr) and its wall seconds."""
    command = [
        sys.executable,
        "-m",
        "sweeps.run",
        *overrides,
        f"sweep.name={name}",
        f"sweep.workdir={tmp}/work",
        f"tracking.uri=sqlite:///{tmp}/mlflow.db",
        *(sys.argv[1:] if extra else []),
    ]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=tmp, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr, time.perf_counter() - started


def estimated_s(tmp: Path, name: str) -> float:
    return float(pd.read_csv(tmp / "reports" / name / "plan.csv")["estimated_s"].sum())


def trial_walls(tmp: Path, name: str) -> tuple[float, float]:
    """(what the sweep's trials held their worker, the sum of their own trial_wall_s)."""
    from tracking.store.reading import open_experiment
    from tracking.store.search import search

    client, experiment_id = open_experiment(f"sqlite:///{tmp}/mlflow.db", "tokengen")
    runs = search(client, experiment_id, f"tags.sweep = '{name}'")
    metrics = [r.data.metrics for r in runs if "trial_wall_s" in r.data.metrics]
    held = sum(m["node_finished_at"] - m["node_started_at"] for m in metrics)
    return held, sum(m["trial_wall_s"] for m in metrics)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        sweep(tmp, "cold", *TARGET, "sweep.dry_run=true")
        cold = estimated_s(tmp, "cold")
        sweep(tmp, "history", "+grid=smoke")
        sweep(tmp, "fitted", *TARGET, "sweep.dry_run=true")
        fitted = estimated_s(tmp, "fitted")
        sweep(tmp, "real", *TARGET)
        real, inside = trial_walls(tmp, "real")
        full_out, full_wall = sweep(
            tmp, "full", "+grid=full", "sweep.accelerator_types=[L40S]", "sweep.dry_run=true", extra=False
        )  # the overrides are the smoke target's
    hours = re.search(r"\*\*Total\*\*: .*", full_out)
    summary = {
        "real_held_s": real,
        "real_trial_wall_s": inside,
        "fitted_estimate_s": fitted,
        "fitted_over_real": fitted / real,
        "cold_estimate_s": cold,
        "cold_over_real": cold / real,
        "full_l40s_line": hours.group(0) if hours else None,
        "full_dry_run_wall_s": full_wall,
    }
    print(
        f"real run: its trials held their worker {real:.1f} s ({inside:.1f} s on their own clocks); with one "
        f"smoke sweep in the store the dry run said {fitted:.1f} s ({fitted / real:.2f}x), on an empty store "
        f"{cold:.1f} s ({cold / real:.2f}x)"
    )
    print(f"+grid=full on L40S, planned in {full_wall:.1f} s (the whole command): {summary['full_l40s_line']}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
