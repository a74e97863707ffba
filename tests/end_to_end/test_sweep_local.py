"""A real local Ray sweep into a real SQLite MLflow store, then resume."""

from __future__ import annotations

import json
import os

import pytest
import ray
from mlflow import MlflowClient
from sweep_helpers import child_runs, small_sweep

from sweeps.driver import run_sweep

pytestmark = pytest.mark.slow  # real trials: on the session's warm Ray, or on a Ray of their own (fresh_ray)


def test_sweep_records_every_trial_then_resume_runs_none(tmp_path, capsys, warm_ray):
    config = small_sweep(tmp_path)
    uri = config.tracking.uri
    assert run_sweep(config) == 0
    out = capsys.readouterr()
    assert "sweep t: 2 finished, 0 failed" in out.err
    assert "kv_cache" in out.out and "speedup" in out.out  # the summary table

    runs = child_runs(uri)
    assert len(runs) == 2
    client = MlflowClient(tracking_uri=uri)
    parent_ids = {r.data.tags["mlflow.parentRunId"] for r in runs}
    assert len(parent_ids) == 1
    parent = client.get_run(parent_ids.pop())
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep_parent"] == "t"
    for run in runs:
        assert run.info.status == "FINISHED"
        assert run.data.params["batch_size"] == "2" and run.data.params["model"] == "tiny"
        assert run.data.metrics["tokens_per_s"] > 0 and run.data.metrics["steps"] >= 1
        assert run.data.tags["status"] == "finished" and run.data.tags["env_torch"]
        assert run.data.tags["variant"] in {"baseline", "kv_cache"}
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"result.json", "trial.log", "tokens.npy"} <= artifacts
        record = json.loads(
            client.download_artifacts(run.info.run_id, "result.json", str(tmp_path))
            and open(f"{tmp_path}/result.json").read()
        )
        assert record["key"] == run.data.tags["trial_key"]
    # the two variants agree on their tokens (float32, same workload)
    assert len({r.data.tags["tokens_sha256"] for r in runs}) == 1

    assert run_sweep(small_sweep(tmp_path)) == 0
    assert "resume: skipping 2 trial(s)" in capsys.readouterr().err
    assert len(child_runs(uri)) == 2  # nothing ran again

    assert run_sweep(small_sweep(tmp_path, "sweep.resume=false", "grid.variant=[kv_cache]")) == 0
    assert len(child_runs(uri)) == 3


def test_unwritable_tracking_store_stops_before_any_trial(tmp_path, capsys, fresh_ray):
    config = small_sweep(tmp_path, "tracking.uri=sqlite:////proc/no/such/dir/m.db")
    assert run_sweep(config) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: cannot write to tracking store sqlite:////proc/no/such/dir/m.db")
    assert not ray.is_initialized()


def test_unreachable_tracking_server_stops_before_any_trial(tmp_path, capsys, fresh_ray):
    config = small_sweep(tmp_path, "tracking.uri=http://127.0.0.1:9")
    assert run_sweep(config) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: tracking server http://127.0.0.1:9 is unreachable")
    assert not ray.is_initialized()


def test_cuda_trials_on_a_local_ray_without_gpus_stop_before_anything(tmp_path, capsys, monkeypatch, fresh_ray):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = small_sweep(tmp_path, "trial.device=cuda", "ray.num_gpus=0", seeded=False)
    assert run_sweep(config) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: the grid has CUDA trials but this machine has no GPU for a local Ray: use trial.device=cpu, "
        "or ray.address=auto on a GPU cluster"
    )
    assert not ray.is_initialized()
    assert not (tmp_path / "mlflow.db").exists()  # nothing recorded, not even a store


def test_a_report_covers_its_plan_including_trials_reused_from_another_sweep(tmp_path, warm_ray):
    from tokengen.contract.names import PLAN_FILE
    from tracking.report.build import build_report

    assert run_sweep(small_sweep(tmp_path, name="a")) == 0  # baseline, kv_cache
    assert run_sweep(small_sweep(tmp_path, "grid.variant=[baseline,kv_cache,static_cache]", name="b")) == 0
    uri = small_sweep(tmp_path).tracking.uri
    assert len(child_runs(uri)) == 3  # b ran static_cache only
    report = build_report(uri, "tokengen", "b", tmp_path / "reports")
    assert report.trials == 3
    text = (report.directory / "report.md").read_text()
    assert "2 of them reused by key from earlier sweeps" in text
    for variant in ("| baseline |", "| kv_cache |", "| static_cache |"):
        assert variant in text.split("## (a)")[1], variant
    client = MlflowClient(tracking_uri=uri)
    plan = json.loads(open(client.download_artifacts(report.parent_id, PLAN_FILE, str(tmp_path))).read())
    assert len(plan["planned"]) == 3 and len(plan["reused"]) == 2


def test_resume_measures_again_what_finished_with_other_threads(tmp_path, capsys, warm_ray):
    """A rerun with sweep.cpus_per_trial=1 must not reuse results measured with 2 threads."""
    assert run_sweep(small_sweep(tmp_path, "sweep.cpus_per_trial=2")) == 0
    capsys.readouterr()
    assert run_sweep(small_sweep(tmp_path, "sweep.cpus_per_trial=2")) == 0  # same environment: reused
    assert "resume: skipping 2 trial(s)" in capsys.readouterr().err
    assert run_sweep(small_sweep(tmp_path, "sweep.cpus_per_trial=1")) == 0
    err = capsys.readouterr().err
    assert "resume: skipping 0 trial(s) already finished in the experiment; measuring 2 again" in err, err
    runs = child_runs(small_sweep(tmp_path).tracking.uri)
    assert sorted(r.data.tags["env_torch_threads"] for r in runs) == ["1", "1", "2", "2"]
    assert len({r.data.tags["env_fingerprint"] for r in runs}) == 2


STORE_SECRETS = (  # every store's, by name: MLflow's, libpq's, MySQL's (a list apart from process_env.SECRETS)
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_TOKEN",
    "PGPASSWORD",
    "PGPASSFILE",
    "MYSQL_PWD",
)


def test_secrets_stay_with_the_driver(tmp_path, monkeypatch, fresh_ray):
    """A Ray worker started by the sweep sees no store's password; a trial's environment has none,
    and keeps its PATH and its GPU; the driver, which talks to the store, keeps them."""
    from sweeps.execution.schedule import connect
    from tokengen.contract.machine.process_env import trial_environment

    for name in STORE_SECRETS:
        monkeypatch.setenv(name, "hunter2")
    env = trial_environment({**os.environ, "CUDA_VISIBLE_DEVICES": "3"}, "default")
    assert not set(STORE_SECRETS) & set(env)
    assert env["PATH"] == os.environ["PATH"] and env["CUDA_VISIBLE_DEVICES"] == "3"
    connect(None, num_cpus=1)

    @ray.remote
    def seen() -> dict:
        return {k: os.environ.get(k) for k in (*STORE_SECRETS, "PATH")}

    worker = ray.get(seen.remote())
    assert {k: v for k, v in worker.items() if k in STORE_SECRETS and v is not None} == {}
    assert worker["PATH"]
    assert all(os.environ[name] == "hunter2" for name in STORE_SECRETS), "the driver keeps its own"


@pytest.mark.slow
def test_a_trial_holds_the_gpu_ray_assigned_it(tmp_path, monkeypatch, fresh_ray):
    """sweep.trial_gpus=1 on a local Ray given one logical GPU: the trial process sees the device Ray
    assigned its task (CUDA_VISIBLE_DEVICES), as a CUDA trial does on a GPU node; the GPU sweep's
    rehearsal on a CPU rests on this."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = small_sweep(tmp_path, "ray.num_gpus=1", "sweep.trial_gpus=1", "grid.variant=[kv_cache]")
    assert run_sweep(config) == 0
    (run,) = child_runs(config.tracking.uri)
    assert run.data.tags["node_gpu_ids"] == "0" and run.data.tags["env_visible_devices"] == "0"
