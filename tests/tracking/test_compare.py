"""`python -m tracking.compare` on real SQLite stores written through the Recorder, with known ratios.

Sweep `a` ran with 1 thread and 1 warmup run, `b` with 2 and 2 (so no key is shared): at batch 2,
kv_cache takes 0.6x A's time on B (faster), static_cache 1.5x (slower), the baseline the same (within
the noise), so the two caches swap ranks; at batch 4 kv_cache is 0.5x but B's trial was contended
(marked, left out of the mean), and static_cache failed on B; hf_generate ran on A only. In a second
store, `x` returned other tokens for kv_cache from decode step 3 on and ran another torch. `c` ran
kv_cache on another model, `d` shares no point with `a`.
"""

from __future__ import annotations

import contextlib
import io
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from compare_helpers import Store, old_comparison, recorded_children, recorded_comparison, tokens_for
from mlflow import MlflowClient

from tracking.compare.__main__ import main
from tracking.store.history import load_history
from tracking.store.reading import load_sweep

TRUE = {("baseline", 2): 1.0, ("kv_cache", 2): 0.6, ("static_cache", 2): 1.5, ("kv_cache", 4): 0.5}
VERDICT = {
    ("baseline", 2): "not significant",
    ("kv_cache", 2): "faster",
    ("static_cache", 2): "slower",
    ("kv_cache", 4): "faster",
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    one = Store(root / "one")
    one.sweep("a", {"cpus_per_trial": 1})
    for i, (variant, batch, runtime) in enumerate(
        [
            ("baseline", 2, 1.0),
            ("kv_cache", 2, 0.5),
            ("static_cache", 2, 0.4),
            ("kv_cache", 4, 0.8),
            ("hf_generate", 2, 0.3),
            ("static_cache", 4, 0.7),
        ]
    ):
        one.trial(variant, runtime, seed=i, threads=1, batch=batch)
    one.sweep("b", {"cpus_per_trial": 2})
    for i, ((variant, batch), ratio) in enumerate(TRUE.items()):
        runtime = {"baseline": 1.0, "kv_cache": 0.5 if batch == 2 else 0.8, "static_cache": 0.4}[variant] * ratio
        one.trial(
            variant, runtime, seed=10 + i, batch=batch, measurement="contended" if batch == 4 else "ok", warmup=2
        )  # other keys than a's: points match on knobs and workload, not on key()
    one.failed("static_cache", batch=4)
    one.sweep("c")
    one.trial("baseline", 1.0, seed=20)
    one.trial("kv_cache", 0.5, seed=21, model="llama-tiny")
    one.sweep("d")
    one.trial("baseline", 1.0, seed=30, model="llama-tiny")
    two = Store(root / "two")
    two.sweep("x")
    two.trial("baseline", 1.0, seed=40, torch="2.14.0")
    changed = tokens_for(2)
    changed[1, 4] += 1  # column 4 = decode step 3 (BOS is column 0): the first 3 steps agree
    two.trial("kv_cache", 0.5, seed=41, torch="2.14.0", tokens=changed)
    return SimpleNamespace(root=root, one=one.uri, two=two.uri)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def compared(stores):
    """a against b, recorded in the store: status, output, and the comparison.csv it wrote (module scope has
    no capsys: captured by hand)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["a", "b", "--uri", stores.one, "--out", str(stores.root / "reports")])
    directory = stores.root / "reports" / "a-vs-b"
    return SimpleNamespace(
        status=status,
        out=out.getvalue(),
        err=err.getvalue(),
        directory=directory,
        csv=pd.read_csv(directory / "comparison.csv") if status == 0 else None,
    )


def test_the_difference_is_named_first(compared):
    assert compared.status == 0, compared.err
    first = compared.out.splitlines()[0]
    assert first.startswith("What differs: threads 1 vs 2;") and "sweep.cpus_per_trial 1 vs 2" in first
    assert "; trial.warmup 1 vs 2;" in first
    assert "torch" not in first  # both ran 2.13.0: said as shared, not as a difference
    text = (compared.directory / "comparison.md").read_text()
    assert text.index("What differs") < text.index("B/A") and "Same on both: " in text and "torch 2.13.0" in text


def test_the_known_ratios_and_verdicts_are_recovered(compared):
    rows = compared.csv.set_index(["variant", "batch_size"])
    failed = rows.loc[("static_cache", 4)]  # matched, and in no ratio: the other points keep theirs
    assert failed["verdict"] == "failed on B" and pd.isna(failed["ratio"]) and failed["status_a"] == "finished"
    rows = rows.drop(("static_cache", 4))
    assert len(rows) == len(TRUE)
    for point, ratio in TRUE.items():
        row = rows.loc[point]
        assert row["ratio_low"] <= ratio <= row["ratio_high"], (point, row["ratio_low"], row["ratio_high"])
        assert row["ratio"] == pytest.approx(ratio, rel=0.03)
        assert row["verdict"] == VERDICT[point], point
        assert row["tokens"] == "same"
    assert bool(rows.loc[("kv_cache", 4), "marked"]) and not rows["marked"].drop(("kv_cache", 4)).any()


def test_the_overview_leaves_out_the_contended_point_and_names_the_rank_swap(compared):
    overview = compared.out.split("## Overview per variant")[1].split("## ")[0]
    kv = next(line for line in overview.splitlines() if line.startswith("| kv_cache |"))
    cells = [c.strip() for c in kv.strip("|").split("|")]
    assert cells[:3] == ["kv_cache", "2", "0.60x"] and cells[-2] == "1"  # points, geomean of the ok one, left_out
    text = (compared.directory / "comparison.md").read_text()
    ranking = text.split("## Where the ranking differs")[1].split("## ")[0]
    assert "| kv_cache | static_cache |" in ranking  # static_cache faster on A, kv_cache on B, both sure
    one_side = text.split("## On one side only")[1]
    assert "| A | hf_generate |" in one_side and "1 point(s) of A, 0 of B" in text
    assert (compared.directory / "ratio_by_point.png").stat().st_size > 10_000


def not_trials(uri: str) -> list:
    """The runs of the experiment that are neither a sweep's nor a trial's."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tokengen").experiment_id
    runs = client.search_runs([experiment], max_results=10000)
    return [r for r in runs if "trial_key" not in r.data.tags and "sweep_parent" not in r.data.tags]


def test_the_comparison_is_one_run_with_its_figures_and_files(compared, stores):
    """One run in A's store, none per point: the verdicts' counts and each variant's overview as metrics, the
    tables, per-point CSV and plot as artifacts, the printed text as its description; the UI's link opens it."""
    run = recorded_comparison(stores.one, "a vs b")
    assert [r.info.run_id for r in not_trials(stores.one)] == [run.info.run_id]
    metrics = run.data.metrics
    assert metrics["points"] == len(TRUE) + 1  # the failed point too, with its verdict and no ratio
    assert (metrics["faster"], metrics["slower"], metrics["not_significant"], metrics["failed_on_B"]) == (2, 1, 1, 1)
    assert metrics["ratio_geomean/kv_cache"] == pytest.approx(0.6, rel=0.03)  # the contended point left out
    assert metrics["left_out/kv_cache"] == 1 and metrics["faster/kv_cache"] == 2
    assert metrics["ratio_geomean/static_cache"] == pytest.approx(1.5, rel=0.03)
    assert metrics["ratio_geomean"] == pytest.approx((1.0 * 0.6 * 1.5) ** (1 / 3), rel=0.03)
    assert run.data.tags["mlflow.note.content"].startswith("What differs: threads 1 vs 2;")
    experiment = run.info.experiment_id
    url = compared.err.strip().splitlines()[-1]
    assert url == f"ui: this comparison: http://127.0.0.1:5000/#/experiments/{experiment}/runs/{run.info.run_id}"
    assert len(load_sweep(stores.one, "tokengen", "a").trials) == 6  # the comparison's run is no sweep's trial


def test_an_older_comparisons_child_runs_still_read(tmp_path):
    """A store holding a comparison recorded with a child run per point keeps it whole beside a new one, and no
    reader takes those children for trials."""
    store = Store(tmp_path / "store")
    for sweep, warmup in (("p", 1), ("q", 2)):
        store.sweep(sweep)
        store.trial("baseline", 1.0, seed=50 + warmup, warmup=warmup)
        store.trial("kv_cache", 0.5, seed=60 + warmup, warmup=warmup)
    point = dict(params={"variant": "baseline"}, metrics={"ratio": 1.0, "ratio_low": 0.9}, tags={"verdict": "same"})
    old = old_comparison(store.uri, "p vs q", [{**point, "name": "baseline b2 p1 L6"}] * 2)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["p", "q", "--uri", store.uri, "--out", str(tmp_path / "reports")]) == 0
    children = recorded_children(store.uri, old)
    assert [c.data.metrics for c in children] == [point["metrics"]] * 2
    assert len(not_trials(store.uri)) == 1 + 2 + 1  # the old comparison and its children, and the new one
    assert len(load_sweep(store.uri, "tokengen", "q").trials) == 2
    assert len(load_history(store.uri, "tokengen").finished_keys) == 4


def test_tokens_that_differ_across_two_stores(stores, capsys, tmp_path):
    status, out, err = run(
        capsys, "a", "x", "--uri-a", stores.one, "--uri-b", stores.two, "--out", str(tmp_path), "--no-record"
    )
    assert status == 0, err
    assert out.splitlines()[0].startswith("What differs: torch 2.13.0 vs 2.14.0; threads 1 vs 2;")
    rows = pd.read_csv(tmp_path / "a-vs-x" / "comparison.csv").set_index(["variant", "batch_size"])
    assert rows.loc[("kv_cache", 2), "tokens"] == "differ (agree 3/6)"
    assert rows.loc[("baseline", 2), "tokens"] == "same"
    assert "Tokens: 1 of 2 matched points returned the same tokens on both sides, 1 differ" in out


def test_other_models_under_the_same_variant_names_are_warned_before_the_table(stores, capsys, tmp_path):
    status, out, err = run(capsys, "a", "c", "--uri", stores.one, "--out", str(tmp_path), "--no-record")
    assert status == 0, err
    warning = "kv_cache ran model tiny on A and llama-tiny on B"
    assert warning in out and out.index(warning) < out.index("## B against A per point")


def _garbage(root: Path) -> str:
    path = root / "garbage.db"
    path.write_bytes(b"not a database at all" * 100)
    return f"sqlite:///{path}"


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["a", "nosuch"],
            "B (nosuch): no sweep named 'nosuch' in {one} experiment 'tokengen' (its sweeps: a, b, c, d)",
        ),
        (["a", "d"], "a and d have no point in common (same knobs and workload): model tiny vs llama-tiny"),
        (["a", "b", "--uri-b", "GARBAGE"], "B (b): cannot read tracking store sqlite:///"),
        (["a", "b", "--uri-a", "sqlite:///{root}/missing.db"], "A (a): no sweep in sqlite:///"),
        (["other/a", "b"], "A (other/a): no sweep in {one} experiment 'other' (no such experiment)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(stores, capsys, tmp_path, argv, said):
    argv = [a.replace("GARBAGE", _garbage(tmp_path)).format(root=tmp_path) for a in argv]
    status, out, err = run(
        capsys, *argv, "--uri" if "--uri-a" not in argv else "--uri-b", stores.one, "--out", str(tmp_path / "reports")
    )
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: " + said.format(one=stores.one)), err
    assert not (tmp_path / "reports").exists()  # refused before any work
    assert not (tmp_path / "missing.db").exists()  # a missing store is never created
    if (tmp_path / "garbage.db").exists():
        with pytest.raises(sqlite3.DatabaseError):  # and a corrupt one is left as it was
            sqlite3.connect(tmp_path / "garbage.db").execute("select * from sqlite_master").fetchall()


def test_rank_swaps_are_found_per_gpu_type():
    """A sweep run on two GPU types holds each point twice, once per type: its variants are ordered per type
    (the pairs keep each side's type as gpu_type_a and gpu_type_b), never mixed into one group."""
    from tracking.compare.findings import ranking_changes

    def pair(variant, gpu, a, b):
        return {
            "variant": variant,
            "batch_size": 2,
            "gpu_type_a": gpu,
            "gpu_type_b": gpu,
            "status_a": "finished",
            "status_b": "finished",
            "runtime_mean_s_a": a,
            "runtime_mean_s_b": b,
            "runtime_std_s_a": 0.001,
            "runtime_std_s_b": 0.001,
            "runs_a": 8,
            "runs_b": 8,
            "measurement_a": "ok",
            "measurement_b": "ok",
        }

    pairs = pd.DataFrame(
        [
            pair("kv_cache", "L40S", 1.0, 1.0),
            pair("static_cache", "L40S", 0.9, 0.9),
            pair("kv_cache", "H100", 1.0, 1.0),
            pair("static_cache", "H100", 0.9, 1.1),
        ]
    )
    changes, noise = ranking_changes(pairs, ["batch_size", "gpu_type"])
    assert noise == 0 and len(changes) == 1
    assert changes.iloc[0]["gpu_type"] == "H100" and changes.iloc[0]["second"] == "static_cache"


def test_the_plot_keeps_the_dozen_variants_that_moved_most():
    """Past a dozen variants the plot draws those whose geometric mean B/A lies furthest from 1.0 and says so; a
    variant whose every point a side judged noisy has no trusted mean and is drawn last."""
    from tracking.compare.render import moved_most
    from tracking.report.plots import MAX_LINES

    names = [f"v{i:02d}" for i in range(MAX_LINES + 3)]
    rows = []
    for i, name in enumerate(names):
        for ratio in (1 + 0.01 * i, 1 / (1 + 0.01 * i) ** 3):  # mean log ratio: -2 log(1 + 0.01 i)
            rows.append({"variant": name, "ratio": ratio, "marked": name == names[-1]})
    rows.append({"variant": names[1], "ratio": 100.0, "marked": True})  # contended: not counted for its variant
    kept, note = moved_most(pd.DataFrame(rows))
    assert sorted(set(kept["variant"])) == names[-1 - MAX_LINES : -1]  # the furthest, the all-marked one dropped
    assert note.startswith(f"the {MAX_LINES} of {len(names)} variants") and "comparison.md: all" in note
    few = pd.DataFrame(rows[: 2 * MAX_LINES])
    shown, said = moved_most(few)
    assert shown is few and said == ""
