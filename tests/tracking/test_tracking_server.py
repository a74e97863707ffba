"""A cluster's shared tracking server, for real: `mlflow server` on 127.0.0.1 with a SQLite backend and
proxied artifacts, a small sweep recorded through it, the runs read back over its REST API and with
MlflowClient, and the report built from it. One server and one sweep for the whole module."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest
from mlflow import MlflowClient
from servers import MlflowServer, free_port
from sweep_helpers import child_runs, run_captured, small_sweep

from tracking.report.build import build_report

pytestmark = pytest.mark.usefixtures("warm_ray")  # one sweep, on the session's warm Ray


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("server")).start()
    try:
        yield SimpleNamespace(url=server.url, tmp=server.root)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def swept(server):
    config = small_sweep(server.tmp, f"tracking.uri={server.url}")
    status, out, err = run_captured(config, server.tmp)
    assert status == 0, err[-2000:]
    return SimpleNamespace(out=out, err=err, client=MlflowClient(tracking_uri=server.url))


def rest(url: str, path: str, body: dict | None = None) -> dict:
    """One call to MLflow's REST API: GET with a query string, or POST with a JSON body."""
    if body is None:
        return json.loads(urllib.request.urlopen(f"{url}/api/2.0/mlflow/{path}", timeout=10).read())
    request = urllib.request.Request(
        f"{url}/api/2.0/mlflow/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    return json.loads(urllib.request.urlopen(request, timeout=10).read())


@pytest.mark.slow
def test_rest_api_returns_every_trial_with_params_metrics_and_tags(server, swept):
    experiment = rest(server.url, "experiments/get-by-name?" + urllib.parse.urlencode({"experiment_name": "tokengen"}))
    found = rest(
        server.url,
        "runs/search",
        {
            "experiment_ids": [experiment["experiment"]["experiment_id"]],
            "filter": "tags.sweep = 't'",
            "max_results": 100,
        },
    )
    runs = [
        {
            "info": r["info"],
            **{
                part: {kv["key"]: kv.get("value") for kv in r["data"].get(part, [])}
                for part in ("params", "metrics", "tags")
            },
        }
        for r in found["runs"]
    ]
    children = [r for r in runs if "mlflow.parentRunId" in r["tags"]]
    parents = [r for r in runs if r["tags"].get("sweep_parent") == "t"]
    assert len(children) == 2 and len(parents) == 1
    for run in children:
        assert run["tags"]["mlflow.parentRunId"] == parents[0]["info"]["run_id"]
        assert run["info"]["status"] == "FINISHED" and run["tags"]["status"] == "finished"
        assert run["params"]["batch_size"] == "2" and run["params"]["variant"] in {"baseline", "kv_cache"}
        assert run["metrics"]["runtime_mean_s"] > 0 and run["tags"]["env_torch"]


@pytest.mark.slow
def test_client_reads_runs_and_artifacts_through_the_server_proxy(server, swept):
    runs = child_runs(server.url)
    assert len(runs) == 2
    for run in runs:
        assert run.info.artifact_uri.startswith("mlflow-artifacts:")  # proxied: clients need no shared disk
        tokens = np.load(swept.client.download_artifacts(run.info.run_id, "tokens.npy", str(server.tmp)))
        assert tokens.dtype == np.int64 and tokens.shape == (
            2,
            int(run.data.params["prompt_len"]) + int(run.data.metrics["steps"]),
        )
    stored = list((server.tmp / "art").rglob("tokens.npy"))
    assert len(stored) == 2  # the server wrote them under --artifacts-destination
    parent = runs[0].data.tags["mlflow.parentRunId"]
    assert {a.path for a in swept.client.list_artifacts(parent, "report")} >= {"report/report.md", "report/results.csv"}
    assert list((server.tmp / "art").rglob("report/report.md"))


@pytest.mark.slow
def test_the_experiment_exists_once_and_before_any_trial(server, swept):
    experiments = [e for e in swept.client.search_experiments() if e.name == "tokengen"]
    assert len(experiments) == 1
    runs = child_runs(server.url)
    parent = swept.client.get_run(runs[0].data.tags["mlflow.parentRunId"])
    assert experiments[0].creation_time <= parent.info.start_time <= min(r.info.start_time for r in runs)


@pytest.mark.slow
def test_the_report_builds_from_the_server(server, swept):
    assert "speedup" in swept.out and "| kv_cache |" in swept.out  # the sweep's own report, through the server
    report = build_report(server.url, "tokengen", None, server.tmp / "from-server")
    assert (report.sweep, report.trials, report.failed) == ("t", 2, 0)
    text = (report.directory / "report.md").read_text()
    assert f"Store `{server.url}`" in text and "| kv_cache | 2 | 8 | 6 |" in text  # batch, prompt, max_seqlen
    table = text.split("## (a)")[1]
    assert "| ok |" in table  # float32: the kv_cache's tokens are the baseline's
    # the comparison went onto the runs through the server, whose own UI opens the sweep's view
    kv = next(r for r in child_runs(server.url) if r.data.tags["variant"] == "kv_cache").data
    assert kv.metrics["speedup"] > 0 and kv.tags["tokens_verdict"] == "ok" and kv.tags["compared"] == "run"
    assert (
        f"ui: the tracking server serves the MLflow UI; this sweep's comparison: {server.url}/#/experiments/"
        in swept.err
    )


def test_a_stopped_server_is_named_in_one_line(tmp_path, capsys):
    from tracking.report.__main__ import main

    url = f"http://127.0.0.1:{free_port()}"
    assert main(["--uri", url]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: tracking server {url} is unreachable") and err.endswith("start it or fix --uri")


@pytest.mark.slow
def test_a_comparison_is_recorded_through_the_server(server, swept, tmp_path, capsys):
    """Through a server, the comparison is one run by MLflow's API: its figures as metrics, its files as artifacts,
    no run per point."""
    from compare_helpers import recorded_comparison

    from tracking.compare.__main__ import main as compare

    assert compare(["t", "t", "--uri", server.url, "--out", str(tmp_path)]) == 0
    assert "ui: the tracking server serves the MLflow UI" in capsys.readouterr().err
    compared = recorded_comparison(server.url, "t vs t")
    metrics = compared.data.metrics  # a ratio a contended trial left out is no metric: only those present
    assert metrics["points"] == 2 and metrics["points/baseline"] == metrics["points/kv_cache"] == 1
    assert all(value == 1.0 for name, value in metrics.items() if name.startswith("ratio_geomean"))
