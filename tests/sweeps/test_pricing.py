"""Pricing a sweep before it runs (sweeps/pricing/price.py, sweeps/dry_run.py, tracking/report/plan_report.py): the dry
run on a real SQLite store, the plan files, the budget guard, longest-first submission and the report's
plan against actual.

Fast lane: no Ray starts (the driver's cluster is faked by pricing_helpers.FakeCluster where a sweep must
'run'), no server, no compile; the CPU's speed is fixed so nothing calibrates this host.
"""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import ray
from mlflow import MlflowClient
from pricing_helpers import CPU, FIXED, T0, FakeCluster, fake_record
from sweep_helpers import small_sweep

from sweeps.driver import run_sweep
from sweeps.planning.config import SweepConfig, load_config
from sweeps.planning.grid import PlannedTrial
from sweeps.pricing import price as pricing
from sweeps.pricing.estimate.observed import prepare
from sweeps.pricing.estimate.priors import WARM_COMPILE_SHARE
from sweeps.pricing.plan_tables import PLAN_CSV, PLAN_MD
from sweeps.pricing.price import price_sweep
from sweeps.pricing.priced import PARTS, PLAN_COLUMNS, REUSED, RUN, makespan
from sweeps.pricing.workers import ClusterUnread, Node, cluster_sizes, find_workers
from tokengen.contract.rules import resolve
from tokengen.contract.spec import TrialSpec
from tracking.report.plan_report import compare, peak_concurrency, render
from tracking.store.history import History, _read_mlflow, load_history
from tracking.store.runs import frame_of
from tracking.store.search import search


@pytest.fixture(autouse=True)
def fixed_cpu(monkeypatch):
    monkeypatch.setattr("sweeps.pricing.estimate.hardware._cached", FIXED)


def grid(tmp_path: Path, *overrides: str, lengths: str = "[8,32]", seeded: bool = True) -> SweepConfig:
    return small_sweep(tmp_path, f"grid.max_seqlen={lengths}", *overrides, seeded=seeded)


def store_state(tmp_path: Path) -> dict:
    """Every file under tmp_path but the plan's and Hydra's, with its bytes' hash: what 'nothing written' means."""
    state = {}
    for path in sorted(tmp_path.rglob("*")):
        relative = path.relative_to(tmp_path)
        if relative.parts[0] in ("reports", "outputs") or path.is_dir() or path.name.endswith("-shm"):
            continue  # -shm: SQLite's shared index of a WAL store's log, which every reader updates
        state[str(relative)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def swept(tmp_path, monkeypatch, capsys, *overrides, workers: int = 1, lengths: str = "[8,32]", cold_start_s=0.0):
    """A whole driver run with the fake cluster: (status, captured out, err, the cluster)."""
    monkeypatch.chdir(tmp_path)
    cluster = FakeCluster(workers, cold_start_s).install(monkeypatch)
    status = run_sweep(grid(tmp_path, *overrides, lengths=lengths))
    out = capsys.readouterr()
    return status, out.out, out.err, cluster


def test_dry_run_prices_the_plan_from_a_real_store_and_writes_nothing_to_it(tmp_path, monkeypatch, capsys):
    status, _, err, _ = swept(tmp_path, monkeypatch, capsys)  # the history: 4 finished trials in a real store
    assert status == 0, err
    before = store_state(tmp_path)
    assert "mlflow.db" in before

    assert run_sweep(grid(tmp_path, "sweep.dry_run=true", lengths="[8,32,64]")) == 0
    out = capsys.readouterr()
    assert not ray.is_initialized()
    assert store_state(tmp_path) == before  # the store, its artifacts and the journal: not a byte changed
    plan = pd.read_csv(tmp_path / "reports" / "t" / PLAN_CSV)
    assert len(plan) == 6 and list(plan.columns) == list(PLAN_COLUMNS)
    reused, runs = plan[plan["action"] == REUSED], plan[plan["action"] == RUN]
    assert sorted(reused["max_seqlen"]) == [8, 8, 32, 32] and sorted(runs["max_seqlen"]) == [64, 64]
    assert set(reused["basis"]) == {"history"} and "history" not in set(runs["basis"])
    assert "2 to run, 4 reused (unverified" in out.out
    assert "| total | 2 | 4 |" in out.out
    assert "nothing ran, nothing was written to sqlite:///" in out.err

    assert run_sweep(grid(tmp_path, "sweep.dry_run=true", "sweep.resume=false", lengths="[8,32,64]")) == 0
    capsys.readouterr()
    plan = pd.read_csv(tmp_path / "reports" / "t" / PLAN_CSV)
    assert (plan["action"] == RUN).all()
    known = plan[plan["max_seqlen"] < 64]
    for row in known.itertuples():  # each ran before: its measured child wall plus the harness outside it
        spec = TrialSpec(**{f: getattr(row, f) for f in TrialSpec.__dataclass_fields__})
        record = fake_record(PlannedTrial(spec), T0).result
        measured, held = record.child_wall_s, record.node_finished_at - record.node_started_at
        assert row.basis == "history" and row.estimated_s == pytest.approx(held, rel=1e-6)  # what it held its worker
        parts = sum(getattr(row, part) for part in PARTS)
        assert parts == pytest.approx(row.estimated_s) and row.in_trial_s == pytest.approx(measured - 0.05)
    assert store_state(tmp_path) == before and not ray.is_initialized()


def test_dry_run_leaves_a_missing_store_uncreated(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = grid(tmp_path, "sweep.dry_run=true", seeded=False)
    assert run_sweep(config) == 0
    out = capsys.readouterr()
    assert not ray.is_initialized()
    assert not (tmp_path / "mlflow.db").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]  # no store, no journal, no artifact folder
    plan = pd.read_csv(tmp_path / "reports" / "t" / PLAN_CSV)
    assert len(plan) == 4 and set(plan["basis"]) == {"prior"} and (plan["action"] == RUN).all()
    assert "0 finished run(s) in sqlite:///" in out.out and "no such file" in out.out


def test_plan_files_hold_every_trial_longest_first_and_the_totals(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run_sweep(grid(tmp_path, "sweep.dry_run=true", "sweep.workers=2", lengths="[8,32,64]")) == 0
    printed = capsys.readouterr().out
    plan = pd.read_csv(tmp_path / "reports" / "t" / PLAN_CSV)
    text = (tmp_path / "reports" / "t" / PLAN_MD).read_text()
    assert text == printed
    assert list(plan["order"]) == list(range(1, 7))
    assert list(plan["estimated_s"]) == sorted(plan["estimated_s"], reverse=True)
    assert (plan["low_s"] <= plan["estimated_s"]).all() and (plan["estimated_s"] <= plan["high_s"]).all()
    assert np.allclose(plan[list(PARTS)].sum(axis=1), plan["estimated_s"])  # the parts add up
    assert np.allclose(plan["timed_s"] / plan["warmup_s"], 2.0) and (plan["profiled_s"] == 0).all()  # runs=2, warmup 1
    assert np.allclose(plan["in_trial_s"], plan["estimated_s"] - plan["harness_s"] - plan["start_s"])
    assert set(plan["variant"]) == {"baseline", "kv_cache"} and set(plan["device_type"]) == {"cpu"}
    total = plan["estimated_s"].sum()
    hours = total / 3600
    assert f"**Total**: 6 trial(s), {hours:,.3f} device-hours" in text
    assert f"${hours * 0.10:.3g}" in text  # the default price of a CPU trial's hour
    for variant in ("baseline", "kv_cache"):
        assert f"| {variant} | 3 | 0 | {plan.loc[plan['variant'] == variant, 'estimated_s'].sum():,.1f} |" in text
    schedule = makespan(plan["estimated_s"].tolist(), 2)
    assert f"| cpu | 6 | 2 | {schedule.seconds:,.1f} | {schedule.lower_bound:,.1f} |" in text
    assert "Workers: sweep.workers=2" in text


def test_the_guard_refuses_an_expensive_sweep_in_one_line_before_anything_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cluster = FakeCluster().install(monkeypatch)  # were the guard to let it through, nothing would start Ray
    assert run_sweep(grid(tmp_path, "sweep.max_device_hours=0.0001", seeded=False)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error:")]
    assert errors == [err[-1]]
    assert err[-1].startswith("error: the sweep's estimate is ") and " device-hours (" in err[-1]
    assert (
        "for 4 trial(s), over sweep.max_device_hours=0.0001: see it trial by trial with sweep.dry_run=true" in err[-1]
    )
    assert not ray.is_initialized() and cluster.submitted == []
    assert list(tmp_path.iterdir()) == []  # no store, no journal: refused before anything

    config = grid(tmp_path, "sweep.max_cost=5")
    config.sweep.prices = {"L40S": 1.86}  # no price for a CPU trial's hour: the limit cannot be checked
    assert run_sweep(config) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: the sweep's estimate is ")
    assert "sweep.max_cost=5 cannot be checked: no price for cpu" in line

    status, _, err, cluster = swept(tmp_path, monkeypatch, capsys, "sweep.max_device_hours=100", "sweep.max_cost=100")
    assert status == 0 and len(cluster.submitted) == 4, err  # within both limits: it runs


def test_a_workers_start_is_priced_once_per_worker_not_on_the_key_that_ran_first(tmp_path, monkeypatch, capsys):
    """The history's first trial on each of two workers waited 7 s for its worker to start. Run again
    (resume=false, two workers, 64 steps new and so longest, first), each known key is priced at what it
    holds a warm worker, and the 7 s once per worker, on the two trials the workers take first."""
    workers = 2
    status, _, err, cluster = swept(
        tmp_path, monkeypatch, capsys, f"sweep.workers={workers}", workers=workers, cold_start_s=7.0
    )
    assert status == 0, err
    firsts = [t.key for t in cluster.submitted[:workers]]
    frame = prepare(load_history(f"sqlite:///{tmp_path}/mlflow.db", "tokengen").frame).set_index("trial_key")
    assert list(frame.loc[firsts, "cold_start_s"]) == [pytest.approx(7.0)] * workers
    assert (frame.drop(index=firsts)["cold_start_s"] == 0).all()

    assert (
        run_sweep(
            grid(tmp_path, "sweep.dry_run=true", "sweep.resume=false", f"sweep.workers={workers}", lengths="[8,32,64]")
        )
        == 0
    )
    capsys.readouterr()
    plan = pd.read_csv(tmp_path / "reports" / "t" / PLAN_CSV)
    for trial in cluster.submitted[:workers]:
        warm = fake_record(trial, T0).result  # what the key holds a warm worker, less any start this plan charges it
        row = plan[plan["key"] == trial.key].iloc[0]
        assert row["estimated_s"] - row["start_s"] == pytest.approx(warm.node_finished_at - warm.node_started_at)
    assert list(plan["start_s"]) == [pytest.approx(7.0)] * workers + [0.0] * (6 - workers)  # the plan's firsts
    assert plan["max_seqlen"].iloc[0] == 64


def test_trials_are_submitted_longest_first_and_the_estimate_is_recorded(tmp_path, monkeypatch, capsys):
    status, out, err, cluster = swept(tmp_path, monkeypatch, capsys, workers=2, lengths="[8,32,64]")
    assert status == 0, err
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    parent = client.search_runs(
        [client.get_experiment_by_name("tokengen").experiment_id], filter_string="tags.sweep_parent = 't'"
    )[0]
    plan = pd.read_csv(client.download_artifacts(parent.info.run_id, PLAN_CSV, str(tmp_path)))
    estimated = dict(zip(plan["key"], plan["estimated_s"]))
    submitted = [estimated[t.key] for t in cluster.submitted]
    assert submitted == sorted(submitted, reverse=True)
    first = cluster.submitted[0].spec
    assert (first.variant, first.max_seqlen) == ("baseline", 64)  # the grid's own order starts at 8 steps
    assert parent.data.metrics["estimated_s"] == pytest.approx(plan["estimated_s"].sum())
    assert parent.data.metrics["estimated_trials"] == 6 and parent.data.tags["planned_workers"] == "cpu:1"
    text = Path(client.download_artifacts(parent.info.run_id, PLAN_MD, str(tmp_path))).read_text()
    assert text.startswith("# Plan of sweep `t` (made before its first trial)") and "6 to run, 0 reused" in text
    assert "estimate: " in err and "longest first" in err

    report = (tmp_path / "reports" / "t" / "report.md").read_text()
    assert "## Plan against actual" in report
    compared = pd.read_csv(tmp_path / "reports" / "t" / "plan_vs_actual.csv")
    assert len(compared) == 6
    for row in compared.itertuples():
        trial = next(t for t in cluster.submitted if t.key == row.key)
        record = fake_record(trial, T0).result
        assert row.held_s == pytest.approx(record.child_wall_s + 0.01, abs=1e-3)  # the node's span
        assert row.trial_wall_s == pytest.approx(record.trial_wall_s)
        assert row.error == pytest.approx((estimated[row.key] - row.held_s) / row.held_s, abs=1e-6)


def test_plan_against_actual_on_known_inputs():
    plan = pd.DataFrame(
        {
            "key": ["a", "b", "c", "d", "e"],
            "variant": ["v"] * 5,
            "action": [RUN, RUN, RUN, RUN, REUSED],
            "estimated_s": [10.0, 20.0, 40.0, 5.0, 7.0],
            "low_s": [5.0, 10.0, 20.0, 2.0, 3.0],
            "high_s": [20.0, 40.0, 80.0, 10.0, 14.0],
            "basis": ["fit", "fit", "prior", "history", "history"],
            "in_trial_s": [9.0, 19.0, 39.0, 4.0, 6.0],
        }
    )
    trials = pd.DataFrame(
        {  # two workers: c then a on one, b then d (failed) on the other; e reused from elsewhere
            "trial_key": ["a", "b", "c", "d", "e"],
            "status": ["finished", "finished", "finished", "failed", "finished"],
            "node_started_at": [100.0 + 50, 100.0, 100.0, 100.0 + 25, 0.0],
            "node_finished_at": [100.0 + 50 + 12.5, 100.0 + 25, 100.0 + 50, 100.0 + 30, 5.0],
            "child_wall_s": [12.0, 24.0, 49.0, 5.0, 4.0],
            "trial_wall_s": [10.0, 20.0, 40.0, 4.0, 3.0],
            "reused_from": [None, None, None, None, "other"],
        }
    )
    result = compare(plan, trials, {"estimated_wall_s": 50.0, "estimated_wall_lower_bound_s": 37.5})
    per = result.per_trial.set_index("key")
    assert list(per.index) == ["a", "b", "c"]  # d failed, e did not run here
    assert per.loc["a", "held_s"] == 12.5 and per.loc["a", "error"] == pytest.approx(10 / 12.5 - 1)
    assert per.loc["c", "error"] == pytest.approx(40 / 50 - 1) and per.loc["b", "error"] == pytest.approx(20 / 25 - 1)
    assert per.loc["a", "in_trial_error"] == pytest.approx(9 / 10 - 1)
    overall = result.by_basis.set_index("basis").loc["all"]
    assert overall["median_error_pct"] == pytest.approx(-20.0) and overall["in_range_pct"] == pytest.approx(100.0)
    assert overall["in_trial_median_abs_error_pct"] == pytest.approx(5.0)  # 10%, 5%, 2.5%
    totals = result.totals.set_index("measure")
    held = totals.iloc[0]
    assert held["estimated_s"] == 70.0 and held["actual_s"] == 87.5
    assert totals.loc["inside the trial process (trial_wall_s)", "actual_s"] == 70.0
    span = result.makespan
    assert span["makespan_s"] == 62.5 and span["workers"] == 2
    assert span["lower_bound_s"] == pytest.approx(max((12.5 + 25 + 50 + 5) / 2, 50.0))
    assert span["over_bound"] == pytest.approx(62.5 / 50.0)
    text = render(result, failed=1)
    assert "Makespan 62.5 s over 4 trial(s) against a lower bound of 50.0 s" in text and "LPT wall was 50.0 s" in text
    assert compare(plan.assign(action=REUSED), trials) is None


def test_peak_concurrency_counts_an_end_before_a_start_at_the_same_instant():
    assert peak_concurrency([0, 1, 2], [1, 2, 3]) == 1
    assert peak_concurrency([0, 0, 5], [10, 4, 6]) == 2


def test_a_model_fitted_once_prices_each_trial_as_a_fresh_fit_would():
    """The model keeps its look-ups between trials (a sweep prices thousands against one fit): a kept
    answer must never be another trial's."""
    from sweeps.pricing.estimate import estimate, fit

    kv = history_frame(["ok"] * 4)
    history = pd.concat(
        [  # three families whose first runs pay different extras (0.2 s, 2 s, 0.2 s)
            kv,
            kv.assign(
                variant="hf_generate",
                engine="generate",
                first_run_s=kv["runtime_mean_s"] + 2.0,
                steps=kv["steps"] // 2,
                trial_key=kv["trial_key"] + "-g",
            ),  # and rows that end halfway
            kv.iloc[:2].assign(variant="baseline", cache="none", compile="default", trial_key=kv["trial_key"] + "-b"),
        ]
    )
    points = [
        ("tiny", "dynamic", "off", "loop", "float32", 2, 64),
        ("tiny", "none", "default", "loop", "float32", 2, 16),
        ("tiny", "none", "off", "generate", "float32", 4, 16),
        ("gpt2", "dynamic", "off", "loop", "bfloat16", 2, 8),
        ("tiny", "dynamic", "default", "generate", "float32", 8, 24),
        ("tiny", "static", "off", "loop", "float32", 2, 8),
        ("tiny", "dynamic", "off", "generate", "float32", 2, 64),
        ("tiny", "none", "off", "loop", "float32", 2, 16),
    ]
    names = ("model", "cache", "compile", "engine", "dtype", "batch_size", "max_seqlen")
    trials = [resolve(**dict(zip(names, point)), prompt_len=8, runs=2).to_dict() for point in points]  # labelled
    assert {t["variant"] for t in trials} >= {"kv_cache", "hf_generate", "baseline"}
    once = fit(history, CPU)
    for trial in trials + trials[::-1]:
        assert estimate(trial, once) == estimate(trial, fit(history, CPU)), trial


def test_each_family_is_priced_for_the_steps_its_rows_took():
    """steps(): a family whose rows ended halfway runs half its max_seqlen; another family, all of it."""
    from sweeps.pricing.estimate import fit

    kv = history_frame(["ok"] * 4)
    history = pd.concat(
        [
            kv,
            kv.assign(
                variant="hf_generate", engine="generate", steps=kv["steps"] // 2, trial_key=kv["trial_key"] + "-g"
            ),
        ]
    )
    model = fit(history, CPU)
    for _ in range(2):  # asked again: the kept answer
        loop = resolve(model="tiny", cache="dynamic", max_seqlen=64, batch_size=2, prompt_len=8, runs=2).to_dict()
        generate = {**loop, "engine": "generate", "variant": "hf_generate"}
        assert model.steps(loop) == 64 and model.steps(generate) == 32


def test_workers_come_from_the_cluster_or_the_local_settings():
    sweep = {"workers": None, "cpus_per_trial": None}
    nodes = [Node(8, 2, ("L40S",)), Node(4, 4, ("H100",)), Node(16, 0, ())]
    found = find_workers(
        load_config({"sweep": sweep, "ray": {"address": "auto"}}),
        {"cpu", "gpu", "L40S", "H100"},
        reader=lambda address: nodes,
    )
    assert found.sizes == {"cpu": 1, "gpu": 6, "L40S": 2, "H100": 4} and not found.assumed  # a CPU trial takes 16
    assert cluster_sizes(nodes, {"cpu"}, 4) == {"cpu": 2 + 1 + 4}

    def unreadable(address):
        raise ClusterUnread("Timed out")

    unread = find_workers(
        load_config({"sweep": sweep, "ray": {"address": "10.0.0.1:6379"}}), {"gpu"}, reader=unreadable
    )
    assert unread.sizes == {"gpu": 1} and unread.assumed
    assert "assumes 1" in unread.source and "Timed out" in unread.source
    local = {"address": None, "num_cpus": 2, "num_gpus": None}

    def workers(**sweep_settings):
        return load_config({"sweep": {**sweep, **sweep_settings}, "ray": local})

    assert find_workers(workers(), {"cpu"}).sizes == {"cpu": 1}  # one CPU trial at a time
    assert find_workers(workers(cpus_per_trial=1), {"cpu"}).sizes == {"cpu": 2}
    assert find_workers(workers(workers=5), {"cpu", "gpu"}).sizes == {"cpu": 5, "gpu": 5}


def history_frame(verdicts: list) -> pd.DataFrame:
    rows = []
    for i, verdict in enumerate(verdicts):
        spec = TrialSpec(
            variant="kv_cache",
            model="tiny",
            cache="dynamic",
            batch_size=2,
            max_seqlen=8 * (i + 1),
            prompt_len=8,
            runs=2,
            stop="never",
        )
        record = fake_record(PlannedTrial(spec), T0)
        rows.append({**record.to_dict(), "trial_key": record.key, "measurement": verdict})
    return pd.DataFrame(rows)


def test_remeasure_rounds_are_priced_at_the_history_share_not_ok(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = grid(tmp_path, lengths="[64]")
    history = History(history_frame(["ok", "ok", "noisy", "contended"]), "test")
    plain = price_sweep(config, history=history).table.set_index("key")
    config.sweep.remeasure = 2  # a setting another branch adds: priced where the configuration has it
    priced = price_sweep(config, history=history)
    table = priced.table.set_index("key")
    assert (table["remeasure_s"] > 0).all() and (plain["remeasure_s"] == 0).all()
    for key, row in table.iterrows():
        one_round = row["remeasure_s"] / (2 * 0.5)  # half the history's verdicts were not ok
        assert one_round == pytest.approx(plain.loc[key, "estimated_s"] - plain.loc[key, "start_s"])  # the whole trial
        assert row["estimated_s"] == pytest.approx(plain.loc[key, "estimated_s"] + row["remeasure_s"])
        assert row["high_s"] == pytest.approx(plain.loc[key, "high_s"] + 2 * one_round)
    assert any("sweep.remeasure: 2 round(s)" in note and "50%" in note for note in priced.notes)


def test_the_remeasure_rate_counts_first_attempts_only():
    """Two keys, one judged contended and then ok on its second attempt: half the trials were remeasured
    (not a third of the runs)."""
    frame = history_frame(["contended", "ok", "ok"]).assign(attempt=["1", "2", "1"])
    frame.loc[1, "trial_key"] = frame.loc[0, "trial_key"]
    share, note = pricing.remeasured_share(History(frame, "test"))
    assert share == pytest.approx(0.5) and "of the store's 2 first attempt(s)" in note
    assert pricing.remeasured_share(History(frame.drop(columns="attempt"), "test"))[0] == pytest.approx(1 / 3)


def test_the_remeasure_rate_comes_from_the_same_kind_of_device():
    """A CPU sweep's verdicts say nothing of a dedicated GPU node: a GPU type is priced from the store's runs on
    that type, else from the GPU prior (with its source named), and a CPU trial from the CPU runs."""
    frame = history_frame(["contended", "noisy", "ok", "ok"])
    share, note = pricing.remeasured_share(History(frame, "test"), "L40S")
    prior, source = pricing.REMEASURE_PRIOR["gpu"]
    assert share == prior and source in note and "no verdict there" in note
    assert pricing.remeasured_share(History(frame, "test"), "cpu")[0] == pytest.approx(0.5)
    on_gpus = frame.assign(device="cuda", accelerator_type=["L40S", "L40S", "H100", "H100"])
    assert pricing.remeasured_share(History(on_gpus, "test"), "L40S")[0] == pytest.approx(1.0)
    assert pricing.remeasured_share(History(on_gpus, "test"), "H100")[0] == pytest.approx(0.0)


def test_the_gpu_prior_is_the_h200_tables_verdicts_as_judged_today():
    """REMEASURE_PRIOR["gpu"] is the share of the H200 table's rows (docs/results.md) that today's rules send back:
    a row is not ok when a reason is left once the table's own launcher (then counted as another process on the
    GPU) is not, so a prior edited away from its source fails here."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text()
    table = text.split("gpt2 float32, batch 32, max_seqlen 100, stop=never, on NVIDIA H200", 1)[1].split("\n\n", 2)[1]
    header, _, *rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]
    measured = [row[header.index("measured")] for row in rows]
    reasons = [
        [r for r in m.partition(": ")[2].split("; ") if r and "other process on the GPU" not in r] for m in measured
    ]
    assert len(rows) == 12 and sum(m == "ok" for m in measured) == 8
    assert pricing.REMEASURE_PRIOR["gpu"][0] == pytest.approx(sum(map(bool, reasons)) / len(rows))
    assert f"{sum(map(bool, reasons))} of the {len(rows)} trials" in pricing.REMEASURE_PRIOR["gpu"][1]


def test_the_fit_learns_from_runs_measured_ok_only():
    history = History(history_frame(["ok", "contended", None]), "test")
    assert list(history.trusted()["measurement"].fillna("none")) == ["ok", "none"]
    assert len(history.finished_keys) == 3  # resume reuses every finished key, whatever its verdict


def test_the_read_only_reader_agrees_with_mlflow_search(tmp_path, monkeypatch, capsys):
    status, _, err, _ = swept(tmp_path, monkeypatch, capsys)
    assert status == 0, err
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mine = load_history(uri, "tokengen").frame.sort_values("run_id").reset_index(drop=True)
    client = MlflowClient(tracking_uri=uri)
    runs = search(client, client.get_experiment_by_name("tokengen").experiment_id, "tags.status = 'finished'")
    theirs = frame_of(runs).sort_values("run_id").reset_index(drop=True)  # the report's own reader
    assert len(mine) == 4 and sorted(mine.columns) == sorted(theirs.columns)
    pd.testing.assert_frame_equal(mine[sorted(mine.columns)], theirs[sorted(mine.columns)], check_dtype=False)
    searched = _read_mlflow(uri, "tokengen").sort_values("run_id").reset_index(drop=True)  # a server's path
    pd.testing.assert_frame_equal(mine[sorted(mine.columns)], searched[sorted(mine.columns)], check_dtype=False)
    assert load_history(f"sqlite:///{tmp_path}/mlflow.db", "no-such-experiment").frame.empty


@pytest.mark.slow  # prices every trial of the full grid
def test_the_full_grid_on_l40s_is_priced_in_seconds(tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir
    from sweep_helpers import CONF

    monkeypatch.chdir(tmp_path)
    with initialize_config_dir(config_dir=CONF, version_base=None):
        overrides = ["+grid=full", "sweep.accelerator_types=[L40S]", f"tracking.uri=sqlite:///{tmp_path}/none.db"]
        config = load_config(compose("config", overrides=overrides))
    started = time.perf_counter()
    priced = price_sweep(config)
    took = time.perf_counter() - started
    from test_grid import full_count

    assert len(priced.table) == full_count() and set(priced.table["device_type"]) == {"L40S"}
    devices = priced.by_device().set_index("device")
    assert priced.cost == pytest.approx(devices.loc["L40S", "device_hours"] * 1.86)
    assert math.isfinite(priced.device_hours) and priced.device_hours > 0
    assert took < 120, f"pricing {len(priced.table)} trials took {took:.1f} s"
    print(f"full grid on L40S: {priced.device_hours:,.1f} device-hours, ${priced.cost:,.0f}, priced in {took:.1f} s")


def test_a_shared_compile_cache_prices_a_twins_compile_warm(tmp_path):
    """With sweep.inductor_cache=shared the first trial of a compiled graph pays its compile and a twin that
    compiles the same graphs (another stop check) the prior's warm share of it (an empty history has no warm
    compile to learn from); cold, every one pays in full. The earlier words read as these."""

    def compile_s(cache: str) -> dict:
        config = small_sweep(
            tmp_path,
            "trial.device=cuda",
            f"sweep.inductor_cache={cache}",
            "grid.variant=[static_cudagraph,static_cudagraph_pipelined,static_cudagraph_deferred]",
            "grid.max_seqlen=[32]",
        )
        table = price_sweep(config, history=History(pd.DataFrame(), "empty")).table
        return dict(zip(table["variant"], table["compile_s"]))

    cold, shared = compile_s("cold"), compile_s("shared")
    assert len(set(cold.values())) == 1  # the same graphs, priced alike
    assert sorted(shared.values()) == pytest.approx(
        sorted([cold["static_cudagraph"]] + [cold["static_cudagraph"] * WARM_COMPILE_SHARE] * 2)
    )
    assert (compile_s("per_trial"), compile_s("per_sweep")) == (cold, shared)


def test_a_plan_with_cuda_trials_under_nsys_says_they_are_priced_without_nsys(tmp_path):
    """One such trial on the H200 ran over 160 s where it was priced at seconds: the plan says so before it is read."""
    empty = History(pd.DataFrame(), "empty")
    traced = small_sweep(tmp_path, "trial.device=cuda", "trial.profile=nsys", "grid.variant=[static_cudagraph]")
    assert any(note.startswith("1 CUDA trial(s) under nsys") for note in price_sweep(traced, history=empty).notes)
    plain = small_sweep(tmp_path, "trial.device=cuda", "grid.variant=[static_cudagraph]")
    assert not any("under nsys" in note for note in price_sweep(plain, history=empty).notes)


def test_a_real_run_orders_its_trials_without_measuring_the_host(tmp_path, monkeypatch):
    """A real sweep prices from the history, else first principles, CPU trials at the day's kept calibration or a
    nominal speed: no second of every core and no calibration file; a budget limit prices with the host measured."""
    from sweeps.pricing.estimate import hardware
    from sweeps.pricing.price import price_for_run
    from sweeps.pricing.priced import summary_line

    monkeypatch.setenv(hardware.CACHE_VARIABLE, str(tmp_path / "cache"))  # empty: nothing kept today
    measured = []

    def measure(seconds=1.0):
        measured.append(1)
        return hardware.Calibration(CPU, 0.0, quiet=False, disturbed_by="others used 1.0 of 2 cores")

    monkeypatch.setattr(hardware, "measure_watched", measure)
    hardware.forget_cpu_speed()
    priced = price_for_run(grid(tmp_path), say=lambda line: None)
    assert measured == [] and not (tmp_path / "cache" / "cpu_speed.json").exists()
    assert priced.nominal_cpu and summary_line(priced).endswith(
        "; CPU seconds rough (a nominal CPU speed: no calibration kept)"
    )
    assert any(note.startswith("CPU trials priced at a nominal 50 GFLOP/s") for note in priced.notes)
    hardware.forget_cpu_speed()
    said = []
    priced = price_for_run(grid(tmp_path, "sweep.max_device_hours=100"), say=said.append)
    assert measured == [1] and not priced.nominal_cpu
    assert said == [hardware.used_calibration().describe()]  # measured busy: said, priced this run only
