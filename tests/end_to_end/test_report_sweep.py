"""A real sweep (local Ray, SQLite store) ends with its report: printed, written under
reports/<sweep>/, attached to the parent run, and rebuilt by `python -m tracking.report` from the
default store without re-running anything. One sweep for the whole module."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from mlflow import MlflowClient
from sweep_helpers import child_runs, run_captured, small_sweep

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("warm_ray")]  # one sweep, on the session's warm Ray

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    # the no-check variant runs all 6 steps; stop=uniform:2-5 ends the others sooner, so its checksum differs
    config = small_sweep(tmp, "grid.variant=[baseline,kv_cache,kv_cache_nocheck]", "trial.stop=uniform:2-5")
    status, out, err = run_captured(config, tmp)
    uri = config.tracking.uri
    runs = child_runs(uri)
    parent = runs[0].data.tags["mlflow.parentRunId"]
    return SimpleNamespace(
        tmp=tmp,
        uri=uri,
        status=status,
        out=out,
        err=err,
        runs=runs,
        parent=parent,
        client=MlflowClient(tracking_uri=uri),
        report=tmp / "reports" / "t",
    )


def test_the_sweep_prints_its_main_table(swept):
    assert swept.status == 0, swept.err[-2000:]
    assert "## (a) Runtime and speedup per trial" in swept.out and "speedup" in swept.out
    for variant in ("baseline", "kv_cache", "kv_cache_nocheck"):
        assert f"| {variant} |" in swept.out
    assert "report: reports/t/report.md, attached to the sweep's run" in swept.err


def test_the_report_is_attached_to_the_parent_run(swept):
    attached = {a.path for a in swept.client.list_artifacts(swept.parent, "report")}
    assert {"report/report.md", "report/results.csv"} <= attached
    copy = swept.client.download_artifacts(swept.parent, "report/report.md", str(swept.tmp))
    assert Path(copy).read_text() == (swept.report / "report.md").read_text()


def test_every_run_carries_the_system_facts_and_the_header_shows_them(swept):
    for run in swept.runs:
        tags = run.data.tags
        assert tags["env_torch"] == torch.__version__ and tags["env_host"] == socket.gethostname()
        assert tags["env_transformers"] and tags["env_python"]
    text = (swept.report / "report.md").read_text()
    assert f"| torch | {torch.__version__} |" in text and f"| host | {socket.gethostname()} |" in text
    assert "| gpu_name | n/a |" in text and f"| cpu_count | {os.cpu_count()} |" in text  # a CPU sweep


def test_cpu_memory_is_na_and_tokens_agree(swept):
    text = (swept.report / "report.md").read_text()
    memory = text.split("## (b) Memory")[1].split("## ")[0]
    assert "| kv_cache | 2 | 8 | 6 | n/a | n/a | n/a | n/a |" in memory  # batch, prompt, max_seqlen, CUDA n/a
    sha = {r.data.tags["variant"]: r.data.tags["tokens_sha256"] for r in swept.runs}
    assert sha["kv_cache"] == sha["baseline"] != sha["kv_cache_nocheck"]  # the no-check's extra EOS steps
    results = pd.read_csv(swept.report / "results.csv").set_index("variant")
    assert results.loc["kv_cache", "tokens"] == "ok"
    assert results.loc["kv_cache_nocheck", "tokens"] == "ok"  # compared over the baseline's steps only
    assert results.loc["kv_cache_nocheck", "agreed_steps"] == results.loc["baseline", "steps"]
    assert "## (e) Stop-check overhead" in text and "## (g)" not in text


def test_results_csv_holds_what_mlflow_holds(swept):
    results = pd.read_csv(swept.report / "results.csv").set_index("run_id")
    assert len(results) == 3
    for run in swept.runs:
        row = results.loc[run.info.run_id]
        assert row["runtime_mean_s"] == pytest.approx(run.data.metrics["runtime_mean_s"])
        assert (
            str(row["batch_size"]) == run.data.params["batch_size"] and row["trial_key"] == run.data.tags["trial_key"]
        )
        base = results[results["variant"] == "baseline"].iloc[0]
        per_step = base["steps"] / run.data.metrics["steps"]  # 1.0 unless the no-check ran more steps
        assert row["compared"] == ("run" if per_step == 1 else "step")
        assert row["speedup"] == pytest.approx(base["runtime_mean_s"] / run.data.metrics["runtime_mean_s"] / per_step)


def test_the_cli_rebuilds_it_from_the_default_store_without_running_anything(swept):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-m", "tracking.report", "--out", "again"],
        cwd=swept.tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| kv_cache_nocheck |" in proc.stdout
    assert (
        f"report: again/t/report.md (3 trials, 0 failed), attached to run {swept.parent} under report/" in proc.stderr
    )
    assert (swept.tmp / "again" / "t" / "results.csv").is_file()
    assert len(child_runs(swept.uri)) == 3
