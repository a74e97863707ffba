"""A sweep that stops cleanly: an interrupted driver keeps what finished, stops what runs and says so;
a killed driver leaves no trial running. Real driver processes (`python -m sweeps.run`), real Ray."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from listening import listening, tree
from mlflow import MlflowClient
from sweep_helpers import child_runs, driver_command, driver_environment, joining_warm_ray

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("warm_ray")]  # real drivers and trials, real Ray

LONG_TRIAL = (
    "grid.variant=[baseline]",
    "grid.batch_size=[8]",
    "grid.max_seqlen=[500]",
    "trial.runs=200",
    "sweep.cpus_per_trial=1",
)  # the tiny model's full recompute: minutes of runs


def start_driver(tmp_path: Path, *overrides: str) -> subprocess.Popen:
    log = open(tmp_path / "driver.log", "w")
    return subprocess.Popen(
        driver_command(tmp_path, *overrides),
        cwd=tmp_path,
        env=driver_environment(),
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def trial_pid(tmp_path: Path, within_s: float = 240) -> int:
    """The running trial's pid, from the file the trial process writes in its folder."""
    deadline = time.time() + within_s
    while time.time() < deadline:
        found = list((tmp_path / "work").rglob("trial.pid"))
        if found:
            time.sleep(1)  # its model is being built: the trial is under way
            return int(found[0].read_text())
        time.sleep(0.5)
    raise AssertionError("no trial started:\n" + (tmp_path / "driver.log").read_text()[-3000:])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
    return state not in ("Z", "X")


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.2)
    return False


SIGNALS = {"SIGINT": (signal.SIGINT, 130), "SIGTERM": (signal.SIGTERM, 143), "SIGKILL": (signal.SIGKILL, -9)}


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """Three drivers side by side (one wait instead of three), each with a long trial under way, then
    each sent its signal, the driver alone: Ray's processes and the trial are not in its group, so
    what ends the trial is the sweep's own doing. The SIGKILL driver starts a local Ray of its own,
    which dies with it; the interrupted two join the session's warm Ray, as a cluster's drivers
    would, and must stop their trials on a Ray that lives on. Per signal: its folder, the trial's pid,
    the driver's exit status."""
    root = tmp_path_factory.mktemp("stopped")
    drivers, outcome = {}, {}
    try:
        for name in SIGNALS:
            (root / name).mkdir()
            ray = () if name == "SIGKILL" else joining_warm_ray()
            drivers[name] = start_driver(root / name, *LONG_TRIAL, *ray)
        pids = {name: trial_pid(root / name) for name in SIGNALS}
        ray_of_killed = listening(tree(drivers["SIGKILL"].pid))  # the killed driver's own Ray, listening
        for name, (signum, _) in SIGNALS.items():
            assert alive(pids[name]), name
            drivers[name].send_signal(signum)
        for name, driver in drivers.items():
            outcome[name] = (root / name, pids[name], driver.wait(timeout=60))
        outcome["ray_of_killed"] = ray_of_killed
    finally:
        for driver in drivers.values():
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
    return outcome


def test_a_killed_driver_leaves_no_trial_running(stopped):
    _, pid, status = stopped["SIGKILL"]
    assert status == -signal.SIGKILL
    assert gone_within(pid, 20), "the trial outlived its driver"


def test_a_local_ray_listens_on_loopback_only_and_not_after_its_driver_is_killed(stopped):
    """The killed driver's Ray (GCS, raylet, agents, workers) listened on 127.0.0.1 alone while it ran, and
    10 s after the SIGKILL none of those processes listens anywhere."""
    ray = stopped["ray_of_killed"]
    assert len(ray) >= 3, ray  # the GCS, the raylet and its agents at least: the check has something to see
    assert {address for addresses in ray.values() for address in addresses} == {"127.0.0.1"}, ray
    deadline = time.time() + 10
    while listening(ray) and time.time() < deadline:
        time.sleep(0.5)
    assert not listening(ray), f"still listening 10 s after the driver's SIGKILL: {listening(ray)}"


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_an_interrupted_sweep_stops_its_trial_keeps_the_rest_and_says_so(stopped, name):
    folder, pid, status = stopped[name]
    assert status == SIGNALS[name][1]
    log = (folder / "driver.log").read_text()
    assert "interrupted (" in log and "0 finished, 1 stopped; rerun the same command to resume" in log, log[-2000:]
    assert "Traceback" not in log, log[-3000:]
    assert gone_within(pid, 20), "the interrupted sweep left its trial running"
    uri = f"sqlite:///{folder}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tokengen")
    parents = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    assert [r.info.status for r in parents] == ["KILLED"]
    assert child_runs(uri) == []
