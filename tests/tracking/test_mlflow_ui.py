"""The comparison in MLflow itself, on a real SQLite store whose figures are known in advance: the
report writes its derived figures on each trial's run (one batch per run), the reader never reads
them back, a rebuild updates them and clears stale ones, the sweep's run describes the overview,
the experiment holds the sweep's saved view, and the URL and commands that open it are printed.
No server, browser or Ray here (tests/end_to_end/test_ui_browser.py has those)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from mlflow import MlflowClient
from servers import seeded_uri

from sweeps.planning.grid import PlannedTrial
from tokengen.contract.record import RECORD_FIELDS
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import TrialRecord, make_record
from tokengen.contract.variants import VARIANTS
from tracking import ui
from tracking.report.__main__ import main as report_main
from tracking.report.build import build_report
from tracking.report.figures.run_figures import figures
from tracking.run_names import run_name, run_names
from tracking.store import derived, view
from tracking.store.reading import load_sweep
from tracking.store.recorder import Recorder

# runtime = a * max_seqlen^2 for the baseline (full recompute), b * max_seqlen for the KV cache
RUNTIME = {
    ("baseline", 2): (0.01, 2),
    ("kv_cache", 2): (0.02, 1),
    ("baseline", 4): (0.015, 2),
    ("kv_cache", 4): (0.02, 1),
}
SPEEDUP = {(2, 8): 4.0, (2, 16): 8.0, (4, 8): 6.0, (4, 16): 12.0}  # kv_cache over its baseline


def planned(variant: str, batch: int, n: int, **fields) -> PlannedTrial:
    spec = TrialSpec(
        variant=variant, model="tiny", batch_size=batch, max_seqlen=n, runs=3, **VARIANTS[variant], **fields
    )
    return PlannedTrial(spec)


def record_of(trial: PlannedTrial, runtime: float) -> TrialRecord:
    spec = trial.spec
    return make_record(
        spec,
        key=trial.key,
        steps=spec.max_seqlen,
        runtime_mean_s=runtime,
        runtime_std_s=runtime / 100,
        tokens_per_s=spec.batch_size * spec.max_seqlen / runtime,
        tokens_sha256="same-tokens",
    )


def runtime_of(variant: str, batch: int, n: int) -> float:
    a, power = RUNTIME[(variant, batch)]
    return a * n**power


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Sweep `s`: baseline and kv_cache at batch 2 and 4, max_seqlen 8 and 16, recorded by the sweep's
    own Recorder with the plan's run names; then its report, built once."""
    root = tmp_path_factory.mktemp("ui")
    uri = seeded_uri(root)
    trials = [planned(v, b, n) for v in ("baseline", "kv_cache") for b in (2, 4) for n in (8, 16)]
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep(
        "s", {"sweep": {"name": "s"}}, resume=False, planned=[t.key for t in trials], names=run_names(trials)
    )
    ids = {}
    for t in trials:
        ids[(t.spec.variant, t.spec.batch_size, t.spec.max_seqlen)] = recorder.record_trial(
            record_of(t, runtime_of(t.spec.variant, t.spec.batch_size, t.spec.max_seqlen))
        )
    report = build_report(uri, "tokengen", "s", root / "reports")
    client = MlflowClient(tracking_uri=uri)
    return SimpleNamespace(
        uri=uri,
        root=root,
        recorder=recorder,
        trials=trials,
        ids=ids,
        report=report,
        client=client,
        experiment_id=recorder.experiment_id,
        parent=recorder.parent_id,
    )


def run_of(store, variant, batch, n):
    return store.client.get_run(store.ids[(variant, batch, n)])


def test_no_derived_name_is_a_recorded_field():
    assert not set(derived.DERIVED) & set(RECORD_FIELDS)  # else the reader would drop what a trial measured


def test_each_trial_run_carries_the_reports_figures(store):
    results = pd.read_csv(store.report.directory / "results.csv").set_index("run_id")
    for (variant, batch, n), run_id in store.ids.items():
        run = store.client.get_run(run_id)
        metrics, tags = run.data.metrics, run.data.tags
        expected = 1.0 if variant == "baseline" else SPEEDUP[(batch, n)]
        assert metrics["speedup"] == pytest.approx(expected)
        assert metrics["speedup"] == pytest.approx(results.loc[run_id, "speedup"])
        assert metrics["speedup_low"] <= metrics["speedup"] <= metrics["speedup_high"]
        assert tags["compared"] == "run" and tags["baseline_run_id"] == store.ids[("baseline", batch, n)]
        assert tags[derived.mark_of(store.parent)] == "s"
        assert "vs_generate" not in metrics  # no generate() peer in this sweep: nothing written, not NaN
        for name in ("speedup", "speedup_low", "speedup_high", "runtime_mean_s", "tokens_per_s"):
            assert metrics["ui/" + name] == float(f"{metrics[name]:.4g}")  # the view's copy, four digits
        assert "ui/vs_generate" not in metrics
        if variant == "kv_cache":
            assert tags["tokens_verdict"] == "ok"
        else:
            assert "tokens_verdict" not in tags  # a baseline has no verdict on itself


def test_the_reader_never_reads_the_derived_figures_back(store):
    trials = load_sweep(store.uri, "tokengen", "s").trials
    leaked = [c for c in trials.columns if derived.is_derived(c)]
    assert leaked == []
    columns = set(pd.read_csv(store.report.directory / "results.csv").columns)
    assert "tokens_verdict" not in columns and not any(c.startswith(derived.REPORT_MARK) for c in columns)


def test_figures_are_written_in_one_transaction_that_mlflow_reads_back(store, tmp_path):
    """A database store's figures go into MLflow's tables in one transaction (thousands of runs in a second):
    MLflow's own reader sees them as it sees a log_batch's, history included; a rebuild writes nothing."""
    runs = load_sweep(store.uri, "tokengen", "s")
    from tracking.report import comparison

    frame, _ = comparison.prepare(runs.trials, None, runs.client)
    other = "0" * 32  # as if another sweep's report used these runs: a first build for it
    wanted = figures(frame, comparison.REPORT_MATCH)
    assert derived.write_back(store.client, store.uri, store.experiment_id, "other", other, wanted) == 8
    kv = store.ids[("kv_cache", 2, 8)]
    data = store.client.get_run(kv).data
    metrics, tags = wanted[kv]
    shown = {"speedup", "speedup_low", "speedup_high"}
    assert {n: data.metrics[n] for n in metrics} == metrics and set(metrics) == shown | {
        f"ui/{n}" for n in (*shown, "runtime_mean_s", "tokens_per_s")
    }
    assert {n: data.tags[n] for n in tags} == tags and data.tags[derived.mark_of(other)] == "other"
    history = [m.value for m in store.client.get_metric_history(kv, "speedup")]
    assert history == [metrics["speedup"]] * 2  # the sweep's own report's, then this build's
    assert (
        derived.write_back(
            store.client, store.uri, store.experiment_id, "other", other, figures(frame, comparison.REPORT_MATCH)
        )
        == 0
    )  # nothing changed: nothing written


def test_the_sweep_run_describes_the_overview(store):
    note = store.client.get_run(store.parent).data.tags["mlflow.note.content"]
    assert "## Overview per variant" in note and "| variant | finished | failed | speedup_geomean |" in note
    geomean = math.exp(sum(math.log(s) for s in SPEEDUP.values()) / 4)
    assert f"| kv_cache | 4 | 0 | {geomean:.2f}x |" in note
    assert "opens at its headline point, b4 p1 L16, grouped by variant" in note and "report/points.csv" in note


def test_the_sweep_run_holds_the_per_point_table(store, tmp_path):
    """One row per point, a column per variant with its speedup there, the fastest named; attached with
    the report and its plots."""
    points = pd.read_csv(store.report.directory / "points.csv")
    assert list(points.columns) == [
        "batch_size",
        "prompt_len",
        "max_seqlen",
        "baseline",
        "kv_cache",
        "fastest",
        "fastest_speedup",
    ]
    assert [tuple(r) for r in points[["batch_size", "max_seqlen", "kv_cache", "fastest"]].to_numpy()] == [
        (2, 8, 4.0, "kv_cache"),
        (2, 16, 8.0, "kv_cache"),
        (4, 8, 6.0, "kv_cache"),
        (4, 16, 12.0, "kv_cache"),
    ]
    assert (points["baseline"] == 1.0).all()
    assert report_main(["--uri", store.uri, "--sweep", "s", "--out", str(tmp_path)]) == 0
    attached = {a.path for a in store.client.list_artifacts(store.parent, "report")}
    assert {"report/report.md", "report/points.csv", "report/runtime_vs_seqlen.png"} <= attached


def test_the_experiment_holds_the_sweeps_view(store):
    """The view opens on the runs at the headline point (the largest batch and length: every point
    compares both variants), grouped by variant, best speedup first, the figures at four digits, the run
    names whole."""
    key = store.report.view_key
    assert key == view.view_key(store.parent) == f"tokengen-{store.parent}"
    value = store.client.get_experiment(store.experiment_id).tags[view.VIEW_PREFIX + key]
    saved = json.loads(value)
    assert saved["name"] == f"sweep s ({store.parent[:8]}) at b4 p1 L16, by variant"
    assert saved["state"].startswith("deflate;")
    state = view.read_view(value)
    assert state["searchFilter"] == (
        derived.view_filter(store.parent, "s") + " and params.`batch_size` = '4' and params.`max_seqlen` = '16'"
    )
    assert state["groupBy"] == {
        "aggregateFunction": "max",
        "groupByKeys": [{"mode": "param", "groupByData": "variant"}],
    }
    assert state["orderByKey"] == "metrics.`ui/speedup`" and state["orderByAsc"] is False
    for name in ("variant", "batch_size", "max_seqlen", "prompt_len", "model"):
        assert f"params.`{name}`" in state["selectedColumns"]
    for name in ("speedup", "speedup_low", "speedup_high", "vs_generate", "runtime_mean_s", "tokens_per_s"):
        assert f"metrics.`ui/{name}`" in state["selectedColumns"]
    for name in ("tokens_verdict", "measurement", "compared"):
        assert f"tags.`{name}`" in state["selectedColumns"]
    assert state["columnOrder"][0] == "attributes.`Run Name`"
    assert state["columnWidths"]["attributes.`Run Name`"] == 190  # "baseline b4 p1 L16" fits the UI's own width
    assert view.name_width(["static_cudagraph_pipelined b64 p128 L400 bfloat16 H100"]) == 382
    # the view's filter finds exactly the runs at that point, one per variant; the mark alone finds every run
    found = store.client.search_runs(
        [store.experiment_id], state["searchFilter"], order_by=["metrics.`ui/speedup` DESC"]
    )
    assert [r.info.run_id for r in found] == [store.ids[("kv_cache", 4, 16)], store.ids[("baseline", 4, 16)]]
    every = store.client.search_runs([store.experiment_id], derived.view_filter(store.parent, "s"))
    assert {r.info.run_id for r in every} == set(store.ids.values())


def test_the_url_lands_on_the_runs_table_in_model_training_mode(store):
    url = ui.view_url("http://127.0.0.1:5000", store.experiment_id, store.report.view_key)
    assert url == (
        f"http://127.0.0.1:5000/#/experiments/{store.experiment_id}/runs?viewStateShareKey=tokengen-"
        f"{store.parent}&compareRunsMode=TABLE&workflowType=machine_learning"
    )
    assert store.report.ui[-1] == f"ui: this sweep's comparison: {url}"
    # a search facet in the URL would make the UI drop the saved view
    assert not any(
        facet in url
        for facet in (
            "searchFilter",
            "orderByKey",
            "orderByAsc",
            "startTime",
            "lifecycleFilter",
            "modelVersionFilter",
            "datasetsFilter",
        )
    )


def test_the_light_server_command(store):
    assert ui.server_command("sqlite:///mlflow.db", 5000) == (
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow server --backend-store-uri "
        f"sqlite:///{Path('mlflow.db').resolve()} --host 127.0.0.1 --port 5000 --workers 1"
    )
    assert store.report.ui[0] == (
        "ui: serve the MLflow UI on this store: MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false "
        f"mlflow server --backend-store-uri {store.uri} --host 127.0.0.1 --port 5000 "
        "--workers 1"
    )
    on_server = ui.how_to_open("http://mlflow.lab:5000/", "3", "k")
    assert on_server == [
        "ui: the tracking server serves the MLflow UI; this sweep's comparison: "
        "http://mlflow.lab:5000/#/experiments/3/runs?viewStateShareKey=k&compareRunsMode=TABLE"
        "&workflowType=machine_learning"
    ]


def test_tracking_ui_print_only(store, capsys):
    assert ui.main(["--uri", store.uri, "--sweep", "s", "--port", "5123", "--print-only"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == ui.view_url("http://127.0.0.1:5123", store.experiment_id, store.report.view_key)
    assert "--port 5123 --workers 1" in err and f"python -m tracking.ui --uri {store.uri} --sweep s" in err


def test_tracking_ui_without_a_report_says_how_to_make_one(tmp_path, capsys):
    uri = seeded_uri(tmp_path, "m.db")
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("bare", {}, resume=False)
    capsys.readouterr()
    assert ui.main(["--uri", uri, "--print-only"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: sweep 'bare' has no comparison view yet: build its report with python -m tracking.report --uri {uri} "
        "--experiment tokengen --sweep bare"
    )


def test_the_report_cli_ends_with_the_ui_lines(store, capsys, tmp_path):
    assert report_main(["--uri", store.uri, "--sweep", "s", "--out", str(tmp_path), "--no-attach"]) == 0
    assert "ui:" not in capsys.readouterr().err  # --no-attach writes nothing, so no view to open
    assert report_main(["--uri", store.uri, "--sweep", "s", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-3].startswith("ui: serve the MLflow UI on this store: MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false")
    assert err[-1] == store.report.ui[-1]


def test_the_chart_a_user_draws(store):
    """The UI's chart, through MLflow's API: one sweep and batch size, max_seqlen against
    runtime_mean_s per variant, and speedup per variant."""
    where = derived.view_filter(store.parent, "s") + " and params.batch_size = '2'"
    runs = store.client.search_runs([store.experiment_id], where, order_by=["params.max_seqlen ASC"])
    lines, speedups = {}, {}
    for run in runs:
        variant = run.data.params["variant"]
        lines.setdefault(variant, []).append((int(run.data.params["max_seqlen"]), run.data.metrics["runtime_mean_s"]))
        speedups.setdefault(variant, []).append(run.data.metrics["speedup"])
    lines = {v: sorted(points) for v, points in lines.items()}
    assert lines == {
        "baseline": [(8, pytest.approx(0.64)), (16, pytest.approx(2.56))],
        "kv_cache": [(8, pytest.approx(0.16)), (16, pytest.approx(0.32))],
    }
    assert sorted(speedups["kv_cache"]) == [pytest.approx(4.0), pytest.approx(8.0)]
    assert speedups["baseline"] == [1.0, 1.0]


def test_runs_are_named_by_what_they_ran(store):
    assert run_of(store, "kv_cache", 4, 16).info.run_name == "kv_cache b4 p1 L16"
    assert run_of(store, "baseline", 2, 8).info.run_name == "baseline b2 p1 L8"


def test_run_names_add_what_the_sweep_varies_and_a_key_piece_for_twins():
    trials = [
        planned("kv_cache", 2, 8),
        planned("kv_cache", 2, 8, dtype="bfloat16"),
        planned("kv_cache", 2, 8, device="cuda"),
        PlannedTrial(planned("kv_cache", 2, 8).spec, "H100"),
    ]
    names = run_names(trials)
    assert names[trials[0].key] == "kv_cache b2 p1 L8 float32 cpu any-gpu"
    assert names[trials[1].key] == "kv_cache b2 p1 L8 bfloat16 cpu any-gpu"
    assert names[trials[2].key] == "kv_cache b2 p1 L8 float32 cuda any-gpu"
    assert names[trials[3].key] == "kv_cache b2 p1 L8 float32 cpu H100"
    seeds = [planned("baseline", 32, 100, seed=1), planned("baseline", 32, 100, seed=2)]
    assert sorted(run_names(seeds).values()) == sorted(f"baseline b32 p1 L100 {t.key[:6]}" for t in seeds)
    served = planned("static_cache_continuous", 4, 100, requests=64)
    assert run_names([served]) == {served.key: "static_cache_continuous r64 b4 p1 L100"}
    assert (
        run_name({"variant": "kv_cache", "batch_size": 2, "prompt_len": 1, "max_seqlen": 8, "key": "abcdef99"})
        == "kv_cache b2 p1 L8 abcdef"
    )


def test_a_rebuild_updates_the_figures_and_clears_stale_ones(tmp_path):
    """Own store: a retried trial's new run takes the figures and the mark, the old one loses the
    mark; a trial whose baseline is gone loses its speedup (NaN) and its baseline tags; one view."""
    uri = seeded_uri(tmp_path)
    trials = [planned(v, 2, n) for v in ("baseline", "kv_cache") for n in (8, 16)]
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("r", {}, resume=False, names=run_names(trials))
    ids = {
        (t.spec.variant, t.spec.max_seqlen): recorder.record_trial(
            record_of(t, runtime_of(t.spec.variant, 2, t.spec.max_seqlen))
        )
        for t in trials
    }
    first = build_report(uri, "tokengen", "r", tmp_path / "reports")
    client = MlflowClient(tracking_uri=uri)
    mark = derived.mark_of(recorder.parent_id)
    view_tag = view.VIEW_PREFIX + first.view_key
    created = json.loads(client.get_experiment(recorder.experiment_id).tags[view_tag])["createdAt"]

    kv8 = trials[2]
    retry = recorder.record_trial(record_of(kv8, 0.08))  # the same key again, twice as fast
    client.delete_run(ids[("baseline", 16)])
    second = build_report(uri, "tokengen", "r", tmp_path / "reports")
    assert second.view_key == first.view_key

    new, old = client.get_run(retry).data, client.get_run(ids[("kv_cache", 8)]).data
    assert new.metrics["speedup"] == pytest.approx(8.0) and new.tags[mark] == "r"
    assert mark not in old.tags  # replaced by its retry: out of the view
    orphan = client.get_run(ids[("kv_cache", 16)]).data  # its baseline was deleted
    assert math.isnan(orphan.metrics["speedup"]) and math.isnan(orphan.metrics["speedup_high"])
    assert math.isnan(orphan.metrics["ui/speedup"]) and orphan.metrics["ui/runtime_mean_s"] == pytest.approx(0.32)
    assert "baseline_run_id" not in orphan.tags and "compared" not in orphan.tags and orphan.tags[mark] == "r"
    history = [
        m.value for m in sorted(client.get_metric_history(ids[("kv_cache", 16)], "speedup"), key=lambda m: m.timestamp)
    ]
    assert history[0] == pytest.approx(8.0) and math.isnan(history[-1])
    views = [k for k in client.get_experiment(recorder.experiment_id).tags if k.startswith(view.VIEW_PREFIX)]
    saved = json.loads(client.get_experiment(recorder.experiment_id).tags[view_tag])
    assert views == [view_tag] and saved["createdAt"] == created <= saved["updatedAt"]
    found = client.search_runs([recorder.experiment_id], derived.view_filter(recorder.parent_id, "r"))
    assert {r.info.run_id for r in found} == {retry, ids[("baseline", 8)], ids[("kv_cache", 16)]}


@pytest.fixture
def routine_loggers():
    """The routine loggers as they were, put back after the test."""
    from sweeps.execution.logs import ROUTINE

    loggers = [logging.getLogger(name) for name in ROUTINE]
    saved = [(lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    yield
    for logger, (handlers, level, propagate) in zip(loggers, saved):
        for handler in logger.handlers:
            if handler not in handlers:
                handler.close()
        logger.handlers, logger.level, logger.propagate = handlers, level, propagate


def test_routine_lines_go_to_the_sweeps_log_and_errors_reach_the_terminal(tmp_path, capsys, routine_loggers):
    from sweeps.execution.logs import quiet_terminal

    path = quiet_terminal("tokengen", "q", tmp_path)
    assert path == tmp_path / ".sweeps" / "logs" / "tokengen" / "q.log"
    logging.getLogger("ray._private.worker").info("Started a local Ray instance.")
    logging.getLogger("ray._private.authentication.authentication_token_setup").warning("Token authentication ...")
    MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/new.db").search_experiments()  # a new store: its tables made
    logging.getLogger("ray").error("the GCS is gone")
    err = capsys.readouterr().err
    assert "ray: ERROR: the GCS is gone" in err
    assert "Started" not in err and "Token" not in err and "Creating" not in err and "upgrade" not in err
    text = path.read_text()
    for line in (
        "Started a local Ray instance.",
        "Token authentication ...",
        "Creating initial MLflow database tables",
        "Running upgrade",
        "the GCS is gone",
    ):
        assert line in text, line
    again = quiet_terminal("tokengen", "q2", tmp_path)  # the next sweep of the process: its own file only
    logging.getLogger("ray").info("second")
    assert "second" in again.read_text() and "second" not in path.read_text()
    assert len(logging.getLogger("ray").handlers) == 2  # the earlier sweep's file handler closed, not stacked
