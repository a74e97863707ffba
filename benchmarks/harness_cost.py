"""What does the sweep harness itself cost per trial?

Runs `+grid=smoke` (28 tiny trials) one trial at a time (all cores each, so the trials do not
share a CPU), then splits the sweep's wall time into:
- in-trial time: what tokengen measured inside each trial process (model build, compile, runs);
- process start: each child's wall time minus its in-trial time (Python start, torch and
  transformers imports): the price of one fresh process per trial;
- harness: the sweep's wall time minus every child's wall time (Ray start, worker start,
  scheduling, MLflow writes, the driver).
The harness target is <= 3 s per trial on 2 cores. The last line is JSON.

    python benchmarks/harness_cost.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sweeps.config import register
from sweeps.run import run_sweep

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def main() -> None:
    register()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        overrides = ["+grid=smoke", "sweep.resume=false", "sweep.cpus_per_trial=null", f"sweep.workdir={tmp}/work",
                     f"tracking.uri=sqlite:///{tmp}/mlflow.db", *sys.argv[1:]]
        with initialize_config_dir(config_dir=CONF, version_base=None):
            config = OmegaConf.to_container(compose("config", overrides=overrides), resolve=True)
        started = time.perf_counter()
        status = run_sweep(config)
        wall = time.perf_counter() - started
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=config["tracking"]["uri"])
        exp = client.get_experiment_by_name(config["tracking"]["experiment"])
        runs = [r for r in client.search_runs([exp.experiment_id], max_results=5000) if "mlflow.parentRunId" in r.data.tags]
    n = len(runs)
    child = sum(r.data.metrics.get("child_wall_s", 0) for r in runs)
    inside = sum(r.data.metrics.get("trial_wall_s", 0) for r in runs)
    result = {
        "trials": n, "status": status, "sweep_wall_s": wall,
        "in_trial_s_per_trial": inside / n, "process_start_s_per_trial": (child - inside) / n,
        "harness_s_per_trial": (wall - child) / n,
    }
    print(f"\n{n} trials in {wall:.1f} s, one at a time: per trial {result['in_trial_s_per_trial']:.2f} s in the trial, "
          f"{result['process_start_s_per_trial']:.2f} s process start, {result['harness_s_per_trial']:.2f} s harness "
          f"(Ray, MLflow, driver)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
