"""A driver killed mid-sweep keeps every trial that had finished; the rerun resumes the rest."""

from __future__ import annotations

import os
import signal
import subprocess
from types import SimpleNamespace

import pytest
from mlflow import MlflowClient
from sweep_helpers import (
    child_runs,
    driver_command,
    driver_environment,
    joining_warm_ray,
    small_sweep,
    wait_for_finished_runs,
)

from sweeps.driver import run_sweep

pytestmark = pytest.mark.slow  # real drivers and real trials, on the session's warm Ray

OVERRIDES = ("grid.batch_size=[1,2]", "sweep.cpus_per_trial=2", "sweep.remeasure=0")  # 4 trials, one at a time


@pytest.fixture(scope="module")
def killed(tmp_path_factory, request):
    """One driver per store (a SQLite file; a PostgreSQL database, tests/postgres_helpers.py, where one can
    be had), started together on the session's warm Ray as a cluster's drivers join it, each killed once it
    has recorded a trial: side by side, one wait instead of two. Per store: its folder and overrides."""
    stores = {"sqlite": ()}
    try:
        stores["postgresql"] = ("tracking.uri=" + request.getfixturevalue("postgres").create_database("killed"),)
    except pytest.skip.Exception as why:
        skipped = str(why)
    else:
        skipped = None
    started = {}
    try:
        for store, uri in stores.items():
            folder = tmp_path_factory.mktemp(store)
            overrides = (*OVERRIDES, *uri)
            config = small_sweep(folder, *overrides)
            MlflowClient(tracking_uri=config.tracking.uri).create_experiment("tokengen")  # before two processes open it
            log = open(folder / "driver.log", "w")
            driver = subprocess.Popen(
                driver_command(folder, *overrides, *joining_warm_ray()),  # the same sweep as a driver process
                cwd=folder,
                env=driver_environment(),
                start_new_session=True,
                stdout=log,
                stderr=log,
            )
            started[store] = SimpleNamespace(folder=folder, overrides=overrides, uri=config.tracking.uri, driver=driver)
        for store in started.values():
            wait_for_finished_runs(store.uri, 1, store.driver, store.folder / "driver.log")
            os.killpg(store.driver.pid, signal.SIGKILL)
            store.driver.wait()
    finally:
        for store in started.values():
            if store.driver.poll() is None:
                os.killpg(store.driver.pid, signal.SIGKILL)
                store.driver.wait()
    return started, skipped


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_killed_driver_loses_nothing_finished(killed, store, warm_ray, monkeypatch):
    """The killed driver joined the session's warm Ray as a cluster's driver; the rerun, in this process, uses it
    too; on a SQLite file and on a PostgreSQL database."""
    started, skipped = killed
    if store not in started:
        pytest.skip(skipped)
    folder, uri = started[store].folder, started[store].uri
    kept = [r for r in child_runs(uri) if r.data.tags.get("status") == "finished"]
    assert 1 <= len(kept) < 4
    assert all(r.info.status == "FINISHED" for r in kept)

    monkeypatch.chdir(folder)  # where its driver ran: the journal it left is there
    assert run_sweep(small_sweep(folder, *started[store].overrides)) == 0
    runs = [r for r in child_runs(uri) if r.info.status == "FINISHED"]
    assert len(runs) == 4
    assert len({r.data.tags["trial_key"] for r in runs}) == 4  # no finished trial ran twice
    # a run the kill cut short (if any) is closed as KILLED, not left RUNNING
    assert not [r for r in child_runs(uri) if r.info.status == "RUNNING"]
