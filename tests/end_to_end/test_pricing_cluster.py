"""Pricing against real Ray: the workers of a live cluster read without joining it, and a real local sweep
submitted longest first whose report sets its recorded estimate beside what it took."""

from __future__ import annotations

import subprocess
import sys
import tempfile

import pandas as pd
import pytest
import ray
from mlflow import MlflowClient
from sweep_helpers import child_runs, run_captured, small_sweep

from sweeps.driver import run_sweep
from sweeps.pricing.plan_tables import PLAN_CSV
from sweeps.pricing.workers import Node, read_cluster

pytestmark = pytest.mark.slow  # starts Ray (a head in a child process, or a local cluster) and runs real trials

HEAD = """
import signal, sys, time
import ray
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
ray.init(num_cpus=1, num_gpus=2, resources={"accelerator_type:L40S": 2}, include_dashboard=False,
         _temp_dir=sys.argv[1])
print(ray.get_runtime_context().gcs_address, flush=True)
try:
    time.sleep(600)
finally:
    ray.shutdown()
"""


@pytest.fixture
def head():
    """A one-node Ray cluster with two logical L40S GPUs, in a process of its own; its address."""
    temp = tempfile.mkdtemp(prefix="rw", dir="/tmp")  # short: Ray's socket paths live under it
    process = subprocess.Popen(
        [sys.executable, "-c", HEAD, temp], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        address = process.stdout.readline().strip()
        assert address, "the Ray head did not start"
        yield address
    finally:
        process.terminate()  # its SIGTERM handler shuts its Ray down
        process.wait(timeout=60)


def test_the_workers_of_a_live_cluster_are_read_without_joining_it(head, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # as a driver of a cluster with token authentication
    assert read_cluster(head) == [Node(1.0, 2.0, ("L40S",))]
    monkeypatch.chdir(tmp_path)
    config = small_sweep(
        tmp_path,
        "trial.device=cuda",
        "sweep.accelerator_types=[L40S]",
        f"ray.address={head}",
        "grid.max_seqlen=[8,32]",
        "sweep.dry_run=true",
    )
    assert run_sweep(config) == 0
    out = capsys.readouterr().out
    assert f"the cluster at ray.address={head}: 1 node(s), 2 GPU(s) (L40S)" in out
    assert "| L40S | 4 | 2 |" in out  # the L40S pool: 4 trials on 2 GPUs
    assert "| L40S | 4 |" in out.split("## Device-hours")[1]  # priced at L40S's hour
    assert not ray.is_initialized()


def test_a_local_sweep_on_two_workers_runs_longest_first_and_reports_plan_against_actual(tmp_path, warm_ray):
    config = small_sweep(tmp_path, "sweep.cpus_per_trial=1", "grid.max_seqlen=[4,24]")  # ray.num_cpus=2: 2 workers
    status, out, err = run_captured(config, tmp_path)
    assert status == 0, err[-3000:]
    uri = config.tracking.uri
    client = MlflowClient(tracking_uri=uri)
    runs = child_runs(uri)
    parent = client.get_run(runs[0].data.tags["mlflow.parentRunId"])
    assert parent.data.tags["planned_workers"] == "cpu:2"
    plan = pd.read_csv(client.download_artifacts(parent.info.run_id, PLAN_CSV, str(tmp_path)))
    order = dict(zip(plan["key"], plan["order"]))
    started = sorted(runs, key=lambda r: r.data.metrics["node_started_at"])
    assert {order[r.data.tags["trial_key"]] for r in started[:2]} == {1, 2}  # the two longest went first
    report = (tmp_path / "reports" / "t" / "report.md").read_text()
    assert "## Plan against actual" in report and "Makespan" in report
    compared = pd.read_csv(tmp_path / "reports" / "t" / "plan_vs_actual.csv")
    assert len(compared) == 4 and (compared["held_s"] > 0).all()
    print(report.split("## Plan against actual")[1])


def _store_rows(path) -> dict:
    import sqlite3

    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            table: connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for table in ("experiments", "runs", "tags", "params", "metrics", "latest_metrics")
        }
    finally:
        connection.close()


def test_a_dry_run_against_a_tracking_server_only_reads_it(tmp_path, monkeypatch, capsys):
    from pricing_helpers import FIXED, FakeCluster
    from servers import MlflowServer

    monkeypatch.setattr("sweeps.pricing.estimate.hardware._cached", FIXED)
    server = MlflowServer(tmp_path / "server").start()
    try:
        monkeypatch.chdir(tmp_path)
        FakeCluster().install(monkeypatch)  # the history: four trials recorded through the server
        assert run_sweep(small_sweep(tmp_path, f"tracking.uri={server.url}", "grid.max_seqlen=[8,32]")) == 0
        capsys.readouterr()
        before = _store_rows(server.root / "m.db")
        dry = small_sweep(tmp_path, f"tracking.uri={server.url}", "grid.max_seqlen=[8,32,64]", "sweep.dry_run=true")
        assert run_sweep(dry) == 0
        out = capsys.readouterr().out
        assert "2 to run, 4 reused (unverified" in out and f"in {server.url}, searched (read only)" in out
        assert _store_rows(server.root / "m.db") == before
        assert not ray.is_initialized()
    finally:
        server.stop()
    assert run_sweep(dry) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"error: tracking server {server.url} is unreachable")
