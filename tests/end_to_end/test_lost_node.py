"""A node lost while its trial runs: Ray retries the task (`max_retries` from sweep.retries) on another
node, and the trial is recorded once. A real `ray.cluster_utils.Cluster`; the sweep is a real driver
process joining it, and the node is removed from under the running trial."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster
from sweep_helpers import child_runs, driver_command, driver_environment

from tokengen.contract.names import TRIAL_LOG

# one trial, long enough to be running when its node goes: three runs of about 2 s on the tiny model, which the
# retry on the next node runs again
SLOW_TRIAL = ("grid.variant=[baseline]", "grid.batch_size=[4]", "grid.max_seqlen=[48]", "trial.runs=3")


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    head = {"num_cpus": 0, "include_dashboard": False}  # the head runs no trial
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_a_trial_whose_node_is_lost_runs_again_elsewhere_and_is_recorded_once(cluster, tmp_path):
    first = cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    command = driver_command(tmp_path, f"ray.address={cluster.address}", "ray.num_cpus=null", *SLOW_TRIAL)
    log = tmp_path / "driver.log"
    with open(log, "w") as sink:
        driver = subprocess.Popen(command, cwd=tmp_path, env=driver_environment(), stdout=sink, stderr=sink)
    try:
        wait_for_trial_start(tmp_path / "work", driver, log)
        cluster.remove_node(first)  # the only node with CPUs: the task waits for the next one
        second = cluster.add_node(num_cpus=2)
        assert driver.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    runs = child_runs(f"sqlite:///{tmp_path}/mlflow.db")
    assert len(runs) == 1, [r.data.tags for r in runs]
    tags = runs[0].data.tags
    assert tags["status"] == "finished", tags.get("error_message")
    assert tags["node_id"] == second.node_id != first.node_id  # it ran again, on the node that was left
    assert "sweep t: 1 finished, 0 failed" in log.read_text()


def wait_for_trial_start(workdir: Path, driver: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    """Until the trial's process has started on its node (its log exists)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert driver.poll() is None, "the sweep ended before its node was lost:\n" + log.read_text()[-3000:]
        if list(workdir.glob(f"t-*/*/{TRIAL_LOG}")):  # <sweep>-<store>/<key>
            return
        time.sleep(0.2)
    raise TimeoutError(f"no trial started under {workdir} in {timeout_s} s")
