"""What does the sweep harness itself cost per trial?

Runs `python -m sweeps.run +grid=harness` (conf/grid/harness.yaml: the smoke grid's tiny CPU trial
narrowed to 12 trivial trials: variant baseline, batch 1, max_seqlen 2..13, stop=never, runs=1,
warmup=0, both cores to each trial, one trial at a time) in a fresh directory with a fresh SQLite store, exactly as a user would, then reports

    harness per trial = (sweep wall - sum of trial_wall_s) / trials

where the sweep wall is what the sweep prints at its end (`... finished, 0 failed, in X s`: Ray
start, the fresh store and every MLflow write included) and trial_wall_s is what tokengen measured
inside each trial (model build, runs). Target: <= 1.5 s. The interference watch is on, as in every
sweep: the first attempts' verdicts and how many trials were measured again are reported beside the
figure (on a quiet machine: every trial ok, none remeasured; a remeasured trial's second attempt counts
as a trial of its own in the figure). The last line is JSON.

    python benchmarks/harness_cost.py [extra Hydra overrides]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [
            sys.executable,
            "-m",
            "sweeps.run",
            "+grid=harness",
            f"sweep.workdir={tmp}/work",
            f"tracking.uri=sqlite:///{tmp}/mlflow.db",
            *sys.argv[1:],
        ]
        proc = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True)
        found = re.search(r"(\d+) finished, (\d+) failed(?:; (\d+) remeasured[^,]*)?, in ([\d.]+) s", proc.stderr)
        if proc.returncode != 0 or not found:
            sys.exit(f"the sweep failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        from tracking.store.reading import open_experiment
        from tracking.store.search import search

        client, experiment_id = open_experiment(f"sqlite:///{tmp}/mlflow.db", "tokengen")
        runs = [r for r in search(client, experiment_id, "") if "mlflow.parentRunId" in r.data.tags]
    wall = float(found[4])
    inside = sum(r.data.metrics["trial_wall_s"] for r in runs)
    verdicts = Counter(r.data.tags.get("measurement") for r in runs if r.data.tags.get("attempt", "1") == "1")
    result = {
        "trials": len(runs),
        "sweep_wall_s": wall,
        "trial_wall_s_sum": inside,
        "harness_s_per_trial": (wall - inside) / len(runs),
        "target_s": 1.5,
        "first_attempts": dict(verdicts),
        "remeasured": int(found[3] or 0),
        "load_1min": os.getloadavg()[0],
    }
    print(
        f"{len(runs)} trials in {wall:.1f} s of sweep wall, {inside:.1f} s inside the trials: "
        f"harness {result['harness_s_per_trial']:.2f} s per trial (target <= 1.5 s)"
    )
    print(
        "first attempts: "
        + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items(), key=str))
        + f"; {result['remeasured']} remeasured; 1-minute load at the end {result['load_1min']:.2f}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
