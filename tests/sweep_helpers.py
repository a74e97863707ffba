"""Shared by the sweep tests: compose a small real config, read runs back from MLflow."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from mlflow import MlflowClient
from omegaconf import OmegaConf

from sweeps.config import register

CONF = str(Path(__file__).resolve().parents[1] / "conf")
register()


def small_sweep(tmp_path: Path, *overrides: str, name: str = "t") -> dict:
    """+grid=smoke cut down to a few fast trials, tracked in a SQLite store under tmp_path."""
    base = [
        "+grid=smoke", f"sweep.name={name}", "grid.variant=[baseline,kv_cache]", "grid.batch_size=[2]",
        "grid.max_seqlen=[6]", "trial.runs=2", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"sweep.workdir={tmp_path}/work", "ray.num_cpus=2",
    ]
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return OmegaConf.to_container(compose("config", overrides=base + list(overrides)), resolve=True)


def child_runs(uri: str, experiment: str = "tokengen") -> list:
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def run_captured(config: dict, cwd: Path) -> tuple[int, str, str]:
    """run_sweep in `cwd` with stdout and stderr captured; Ray shut down after."""
    import io
    import os
    from contextlib import redirect_stderr, redirect_stdout

    import ray

    from sweeps.run import run_sweep

    out, err, previous = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            status = run_sweep(config)
    finally:
        ray.shutdown()
        os.chdir(previous)
    return status, out.getvalue(), err.getvalue()
