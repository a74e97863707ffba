"""A driver killed mid-sweep keeps every trial that had finished; the rerun resumes the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from mlflow import MlflowClient
from sweep_helpers import child_runs, driver_command, driver_environment, joining_warm_ray, small_sweep

from sweeps.driver import run_sweep

pytestmark = pytest.mark.slow  # a real driver and real trials, on the session's warm Ray


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_killed_driver_loses_nothing_finished(tmp_path, warm_ray, store, request):
    """The killed driver joined the session's warm Ray as a cluster's driver; the rerun, in this process, uses it
    too; on a SQLite file and on a PostgreSQL database (tests/postgres_helpers.py)."""
    overrides = ["grid.batch_size=[1,2]", "sweep.cpus_per_trial=2", "sweep.remeasure=0"]  # 4 trials, one at a time
    if store == "postgresql":
        overrides.append("tracking.uri=" + request.getfixturevalue("postgres").create_database("killed"))
    config = small_sweep(tmp_path, *overrides)
    uri = config.tracking.uri
    argv = driver_command(tmp_path, *overrides, *joining_warm_ray())  # the same sweep as a driver process
    MlflowClient(tracking_uri=uri).create_experiment("tokengen")  # the store exists before two processes open it
    log = open(tmp_path / "driver.log", "w")
    driver = subprocess.Popen(
        argv, cwd=tmp_path, env=driver_environment(), start_new_session=True, stdout=log, stderr=log
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and driver.poll() is None:
            if sum(r.data.tags.get("status") == "finished" for r in child_runs(uri)) >= 1:
                break
            time.sleep(0.5)
        assert driver.poll() is None, (
            "the sweep ended before it could be killed:\n" + (tmp_path / "driver.log").read_text()[-3000:]
        )
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        log.close()
    kept = [r for r in child_runs(uri) if r.data.tags.get("status") == "finished"]
    assert 1 <= len(kept) < 4
    assert all(r.info.status == "FINISHED" for r in kept)

    assert run_sweep(small_sweep(tmp_path, *overrides)) == 0
    runs = [r for r in child_runs(uri) if r.info.status == "FINISHED"]
    assert len(runs) == 4
    assert len({r.data.tags["trial_key"] for r in runs}) == 4  # no finished trial ran twice
    # a run the kill cut short (if any) is closed as KILLED, not left RUNNING
    assert not [r for r in child_runs(uri) if r.info.status == "RUNNING"]
