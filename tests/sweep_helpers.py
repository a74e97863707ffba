"""Shared by the sweep tests: compose a small real config, read runs back from MLflow."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from mlflow import MlflowClient
from servers import seeded_uri

from sweeps.planning.config import SweepConfig, load_config, register

ROOT = Path(__file__).resolve().parents[1]
CONF = str(ROOT / "conf")
register()


def small_overrides(tmp_path: Path, name: str = "t") -> list[str]:
    """+grid=smoke cut down to a few fast trials, tracked in a SQLite store under tmp_path. Two fixed runs and no
    remeasure round: a busy test machine must not change how many runs a test counts (tests/end_to_end/test_remeasure_sweep.py
    turns remeasuring on)."""
    return [
        "+grid=smoke",
        f"sweep.name={name}",
        "grid.variant=[baseline,kv_cache]",
        "grid.batch_size=[2]",
        "grid.max_seqlen=[6]",
        "trial.runs=2",
        "sweep.remeasure=0",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"sweep.workdir={tmp_path}/work",
        "ray.num_cpus=2",
    ]


def seed_store(tmp_path: Path, overrides, seeded: bool) -> None:
    """Where the overrides keep `small_overrides`' store, start it as a copy of the session's migrated empty one
    (tests/servers.py): MLflow makes its tables once per session, not once per sweep (2-3 s each on 2 cores).
    A test of what a sweep does to a missing store passes seeded=False; one that names its store gets that."""
    if seeded and not (tmp_path / "mlflow.db").exists() and not any(o.startswith("tracking.uri=") for o in overrides):
        seeded_uri(tmp_path)


def small_sweep(tmp_path: Path, *overrides: str, name: str = "t", seeded: bool = True) -> SweepConfig:
    """The composed config of `small_overrides` plus `overrides`, typed as run_sweep takes it."""
    seed_store(tmp_path, overrides, seeded)
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return load_config(compose("config", overrides=small_overrides(tmp_path, name) + list(overrides)))


def driver_command(tmp_path: Path, *overrides: str, name: str = "t", seeded: bool = True) -> list[str]:
    """The same small sweep as a real driver process: `python -m sweeps.run ...`."""
    seed_store(tmp_path, overrides, seeded)
    return [sys.executable, "-m", "sweeps.run", *small_overrides(tmp_path, name), *overrides]


def driver_environment(**extra: str) -> dict[str, str]:
    """The driver's environment: this checkout importable from any working directory."""
    path = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": path, **extra}


def child_runs(uri: str, experiment: str = "tokengen") -> list:
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def wait_for_finished_runs(url: str, count: int, driver: subprocess.Popen, log: Path, timeout_s: float = 240) -> None:
    """Until the store at `url` holds `count` finished trials, the driver that records them still running."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert driver.poll() is None, (
            f"the sweep ended before {count} result(s) were recorded:\n" + log.read_text()[-3000:]
        )
        try:
            if sum(r.data.tags.get("status") == "finished" for r in child_runs(url)) >= count:
                return
        except Exception:  # noqa: BLE001 - the experiment does not exist until the driver makes it
            pass
        time.sleep(0.3)
    raise TimeoutError(f"fewer than {count} trials recorded after {timeout_s} s")


def store_left_by(folder: Path, code: str) -> Path:
    """folder/mlflow.db, a migrated store that `code` (its URI in sys.argv[1]) wrote in a process that then ended:
    made once per module and copied by each test, where a test needs a store no process holds open."""
    uri = seeded_uri(folder)
    subprocess.run([sys.executable, "-c", code, uri], env=driver_environment(), cwd=folder, check=True)
    db = folder / "mlflow.db"
    assert not db.with_name("mlflow.db-wal").exists(), "the writer did not close the store: a copy would miss its log"
    return db


_warm = {}  # the address of the local Ray warm_local_ray started, while it lives


def warm_local_ray() -> None:
    """The session's local Ray, started as run_sweep starts one for `small_overrides` (2 CPUs), or kept
    from the last test that used it; a Ray connected to anything else is shut down first."""
    import ray

    from sweeps.execution.schedule import connect

    if ray.is_initialized() and ray.get_runtime_context().gcs_address == _warm.get("address"):
        return
    if ray.is_initialized():
        ray.shutdown()
    connect(None, num_cpus=2)
    _warm["address"] = ray.get_runtime_context().gcs_address


def joining_warm_ray() -> tuple[str, str]:
    """Overrides for a driver process that joins the session's warm Ray (warm_local_ray) as a cluster's
    driver would, where what a test proves does not hang on the driver starting a Ray of its own."""
    warm_local_ray()
    return f"ray.address={_warm['address']}", "ray.num_cpus=null"


def run_captured(config: dict, cwd: Path) -> tuple[int, str, str]:
    """run_sweep in `cwd` with stdout and stderr captured, on the session's warm Ray (left up)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from sweeps.driver import run_sweep

    out, err, previous = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    warm_local_ray()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            status = run_sweep(config)
    finally:
        os.chdir(previous)
    return status, out.getvalue(), err.getvalue()
