"""Two users, one store: two sweeps with different names but the same trials, started at the same moment
as two real driver processes joining one Ray (the session's warm one, as a cluster's drivers join
its head), against one new SQLite file and (at the same time) against one tracking server, then
against one new PostgreSQL database. Both finish, each records each of its trials once, and neither
touches the other's trial folders on the node (`<workdir>/<sweep>-<store>/<key>`)."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from servers import MlflowServer
from sweep_helpers import child_runs, driver_command, driver_environment, joining_warm_ray

from tokengen.contract.names import RESULT_FILE

SWEEPS = ("alice", "bob")


@pytest.fixture
def shared(tmp_path, warm_ray):
    """One Ray for every user, and a tracking server that comes up while the SQLite pair starts."""
    server = MlflowServer(tmp_path / "server").launch()
    try:
        yield SimpleNamespace(ray=joining_warm_ray(), server=server)
    finally:
        server.stop()


def start_two_sweeps(cwd: Path, ray: tuple[str, ...], uri: str) -> dict[str, tuple[subprocess.Popen, Path]]:
    """Both users' drivers, started together in one working directory, each with its own sweep name."""
    cwd.mkdir(parents=True, exist_ok=True)
    drivers = {}
    for name in SWEEPS:
        command = driver_command(
            cwd, f"tracking.uri={uri}", *ray, "grid.variant=[kv_cache]", "sweep.cpus_per_trial=1", name=name
        )  # one trial each: the same key in both
        log = cwd / f"{name}.log"
        with open(log, "w") as sink:
            drivers[name] = subprocess.Popen(command, cwd=cwd, env=driver_environment(), stdout=sink, stderr=sink), log
    return drivers


def wait_for(drivers: dict[str, tuple[subprocess.Popen, Path]]) -> dict[str, str]:
    """Each driver's exit (0: every trial finished and recorded), then its log."""
    try:
        for driver, log in drivers.values():
            assert driver.wait(timeout=180) == 0, log.read_text()[-3000:]
    finally:
        for driver, _ in drivers.values():
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    return {name: log.read_text() for name, (_, log) in drivers.items()}


def check_each_sweep_recorded_its_trials_once_from_its_own_folders(uri: str, tmp_path, logs: dict) -> None:
    runs = child_runs(uri)
    per_sweep = Counter(run.data.tags["sweep"] for run in runs)
    assert per_sweep == {"alice": 1, "bob": 1}, per_sweep
    keys = {name: Counter(r.data.tags["trial_key"] for r in runs if r.data.tags["sweep"] == name) for name in SWEEPS}
    assert keys["alice"] == keys["bob"] and set(keys["alice"].values()) == {1}  # same trials, each once per sweep
    for name in SWEEPS:
        assert f"sweep {name}: 1 finished, 0 failed" in logs[name]
        [sweep_dir] = (tmp_path / "work").glob(f"{name}-*")  # <sweep>-<store>: one store here
        folders = {p.name for p in sweep_dir.iterdir() if p.is_dir()}
        assert folders == set(keys[name]), f"{name}'s trial folders: {folders}"
        for run in (r for r in runs if r.data.tags["sweep"] == name):
            left = json.loads((sweep_dir / run.data.tags["trial_key"] / RESULT_FILE).read_text())
            # the file in the sweep's own folder is the result that sweep recorded, not the other's run of the key
            assert left["runtime_mean_s"] == pytest.approx(run.data.metrics["runtime_mean_s"], rel=1e-9)


@pytest.mark.slow
def test_two_users_at_once_on_one_new_sqlite_file_and_on_one_tracking_server(shared, tmp_path):
    """Both pairs run at the same time (four drivers on one Ray), which keeps this test short."""
    stores = {"sqlite": f"sqlite:///{tmp_path}/sqlite/mlflow.db"}  # neither driver finds it: both create it
    running = {"sqlite": start_two_sweeps(tmp_path / "sqlite", shared.ray, stores["sqlite"])}
    stores["server"] = shared.server.wait_until_healthy().url
    running["server"] = start_two_sweeps(tmp_path / "server", shared.ray, stores["server"])
    for kind, drivers in running.items():
        logs = wait_for(drivers)
        check_each_sweep_recorded_its_trials_once_from_its_own_folders(stores[kind], tmp_path / kind, logs)


@pytest.mark.slow
def test_two_users_at_once_on_one_new_postgresql_database(postgres, tmp_path, warm_ray):
    """The cluster's store as docs/cluster.md runs it: both drivers find the database empty and make
    MLflow's tables, the experiment and their sweep's claim at the same moment."""
    uri = postgres.create_database("two_users")
    logs = wait_for(start_two_sweeps(tmp_path / "postgresql", joining_warm_ray(), uri))
    check_each_sweep_recorded_its_trials_once_from_its_own_folders(uri, tmp_path / "postgresql", logs)


MOUNTS = """/dev/vda / ext4 rw,relatime 0 0
fileserver:/export/team /mnt/team nfs4 rw,relatime 0 0
/dev/vdb /mnt/team/local\\040disk ext4 rw 0 0
"""


@pytest.mark.parametrize(
    "uri, shared_safely",
    [
        ("sqlite:////home/me/mlflow.db", True),
        ("sqlite:////mnt/team/mlflow.db", False),
        ("sqlite:////mnt/team/local disk/mlflow.db", True),
        ("http://10.0.1.5:5000", True),
    ],
)
def test_sqlite_on_a_network_filesystem_is_said_in_one_line(uri, shared_safely):
    from tracking.store.connect import sqlite_sharing_problem

    problem = sqlite_sharing_problem(uri, MOUNTS)
    assert (problem is None) == shared_safely
    if problem:
        assert problem == (
            f"tracking: {uri} is on a network filesystem (nfs4), where SQLite's locks do not hold: "
            "for sweeps from several machines use one tracking server (docs/cluster.md: One tracking server "
            "for a cluster)"
        )
