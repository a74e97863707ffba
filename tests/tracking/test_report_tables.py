"""The report's tables and verdicts on a real SQLite store whose every figure is known in advance.

The store is written the way the sweep driver writes it (a parent run, child runs with params,
metrics, tags and a tokens.npy artifact), with runtimes chosen so each table's answer is exact:
the baseline grows as steps^2 and the compiled variant as steps, a pipelined check saves 25%, one variant
returns wrong tokens, a bfloat16 variant drifts, one trial failed and was not retried, one failed
and then finished, one was cut short by a killed driver, and one workload's baseline was recorded
by an earlier sweep.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import math
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient
from servers import seeded_uri

from tokengen.contract.declarations import LAGGED, in_family
from tokengen.contract.names import TOKENS_FILE
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import make_record
from tokengen.contract.variants import VARIANTS, label_for
from tracking.report import article_tables, comparison, gpu_tables
from tracking.report.__main__ import main
from tracking.report.build import build_report
from tracking.store.reading import add_outside_baselines, fill_error_messages, load_sweep
from tracking.store.recorder import Recorder
from tracking.store.runs import params_of, tags_of

EOS = 0
PRICES = {"cpu": 0.1, "L40S": 2.0, "H100": 4.0}
ENV = {"L40S": "NVIDIA L40S", "H100": "NVIDIA H100 80GB HBM3"}


def base_tokens(n: int, steps: int, batch: int = 2) -> np.ndarray:
    rng = np.random.default_rng(n * 100 + batch)
    tokens = rng.integers(1, 500, size=(batch, 1 + steps), dtype=np.int64)  # (B, 1 + steps)
    tokens[:, 0] = EOS
    return tokens


def padded(tokens: np.ndarray, n: int) -> np.ndarray:
    """A no-check run's tokens: the baseline's, then EOS up to all n steps."""
    return np.concatenate([tokens, np.full((len(tokens), 1 + n - tokens.shape[1]), EOS)], axis=1)


def changed(tokens: np.ndarray, *cells: tuple[int, int]) -> np.ndarray:
    out = tokens.copy()
    for row, column in cells:
        out[row, column] += 1
    return out


class Store:
    """A store written through the sweep's own Recorder, so a renamed field or tag fails these tests."""

    def __init__(self, root: Path):
        self.uri = seeded_uri(root)
        self.root = root
        self.client = MlflowClient(tracking_uri=self.uri)
        self.client.create_experiment("tokengen", artifact_location=str(root / "art"))
        self.recorder = Recorder(self.uri, "tokengen")
        self.parent = None
        self.ids: dict[str, str] = {}

    def start_sweep(self, name: str) -> None:
        config = {"sweep": {"name": name, "prices": PRICES}}
        self.parent = self.recorder.start_sweep(name, config, resume=False)

    def trial(
        self,
        label: str,
        variant: str,
        *,
        runtime: float = 1.0,
        tokens: np.ndarray | None = None,
        dtype: str = "float32",
        batch: int = 2,
        n: int = 8,
        gpu: str = "L40S",
        status: str = "finished",
        key: str | None = None,
        metrics: dict | None = None,
        error: str | None = None,
    ) -> str:
        spec = TrialSpec(
            variant=variant,
            model="tiny",
            dtype=dtype,
            device="cuda",
            batch_size=batch,
            max_seqlen=n,
            **VARIANTS[variant],
            stop="uniform:2-6",
            warmup=1,
            runs=3,
        )
        values = {}
        if status == "finished":
            steps = tokens.shape[1] - 1
            values = {
                "steps": steps,
                "tokens_generated": batch * steps,
                "runtime_mean_s": runtime,
                "runtime_std_s": runtime / 100,
                "runtime_min_s": runtime * 0.99,
                "runtime_max_s": runtime * 1.01,
                "tokens_per_s": batch * steps / runtime,
                "useful_tokens_per_s": batch * steps / runtime,
                "energy_j_per_token": 0.5 if gpu == "H100" else 0.8,
                "mem_allocated_peak_bytes": 100 * 2**20,
                "mem_reserved_peak_bytes": 150 * 2**20,
                "mem_fragmentation_bytes": 50 * 2**20,
                "mem_fragmentation_pct": 100 / 3,
                "tokens_sha256": hashlib.sha256(tokens.tobytes()).hexdigest(),
                **(metrics or {}),
            }
        elif status == "failed":
            values = {"error_type": "OutOfMemory", "error_message": error}
        record = make_record(
            spec,
            key=key or label,
            status=status,
            accelerator_type=gpu,
            env_gpu_name=ENV[gpu],
            env_torch="2.13.0",
            env_transformers="5.24.0",
            env_cuda="13.0",
            env_driver="580.65",
            env_host="node-a",
            **values,
        )
        if tokens is not None:
            buffer = io.BytesIO()
            np.save(buffer, tokens)
            record = dataclasses.replace(record, files={TOKENS_FILE: buffer.getvalue()})
        if status == "cut":  # what a driver killed mid-write leaves: a run without its status tag
            run_id = self.client.create_run(
                self.recorder.experiment_id,
                run_name=label,
                tags={"mlflow.parentRunId": self.parent, **tags_of(record, self.recorder.sweep)},
            ).info.run_id
            self.client.delete_tag(run_id, "status")
            self.client.log_batch(run_id, params=params_of(record), synchronous=True)
            self.client.set_terminated(run_id, "KILLED")
        else:
            run_id = self.recorder.record_trial(record)
        self.ids[label] = run_id
        return run_id


B8, B16 = base_tokens(8, 6), base_tokens(16, 14)  # the baselines stop before max_seqlen
BF16 = base_tokens(9, 6)
B4 = base_tokens(8, 6, batch=4)
PROFILE = {"gpu_idle_us_per_step": 120.0, "gpu_busy_pct": 80.0, "host_sync_us_per_step": 95.0}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    s = Store(tmp_path_factory.mktemp("syn"))
    s.start_sweep("older")
    s.trial("old-base-b4", "baseline", runtime=1.2, tokens=B4, batch=4)
    s.start_sweep("syn")
    for n, base in ((8, B8), (16, B16)):
        steps = base.shape[1] - 1  # 6 and 14: the runtimes grow with the steps taken
        s.trial(f"base{n}", "baseline", runtime=0.01 * steps**2, tokens=base, n=n)
        s.trial(f"compiled{n}", "static_compiled", runtime=0.02 * steps, tokens=base, n=n, metrics=PROFILE)
        s.trial(f"pipelined{n}", "static_compiled_pipelined", runtime=0.015 * steps, tokens=base, n=n)
        s.trial(f"deferred{n}", "static_compiled_deferred", runtime=0.016 * steps, tokens=base, n=n)
        s.trial(f"nocheck{n}", "static_compiled_nocheck", runtime=0.014 * n, tokens=padded(base, n), n=n)
    s.trial("kv8", "kv_cache", runtime=0.3, tokens=B8)
    s.trial("hf8", "hf_generate", runtime=0.15, tokens=B8)  # transformers' generate() as a peer
    s.trial("wrong8", "static_cache", runtime=0.25, tokens=changed(B8, (0, 4)))  # differs at decode step 3
    s.trial("kvnocheck8", "kv_cache_nocheck", runtime=0.2, tokens=padded(changed(B8, (1, 6)), 8))
    s.trial("bf-base", "baseline", runtime=0.5, tokens=BF16, dtype="bfloat16")
    s.trial("bf-kv", "kv_cache", runtime=0.1, tokens=changed(BF16, (0, 5), (1, 3)), dtype="bfloat16")
    s.trial("bf-static", "static_cache", runtime=0.09, tokens=BF16, dtype="bfloat16")
    s.trial("h100-base", "baseline", runtime=0.32, tokens=B8, gpu="H100")
    s.trial("h100-compiled", "static_compiled", runtime=0.04, tokens=B8, gpu="H100")
    s.trial("oom", "static_cudagraph", n=16, status="failed", error="CUDA out of memory. Tried to allocate 2.00 GiB")
    s.trial("kv16-first", "kv_cache", n=16, status="failed", key="kv16", error="lost node")
    s.trial("kv16", "kv_cache", runtime=0.5, tokens=B16, n=16, key="kv16")
    s.trial("kv-b4", "kv_cache", runtime=0.4, tokens=B4, batch=4)  # its baseline is in sweep "older"
    s.trial("cut", "static_cache_deferred", status="cut")
    return s


@pytest.fixture(scope="module")
def prepared(store):
    runs = load_sweep(store.uri, "tokengen", None)
    fill_error_messages(runs.client, runs.trials)
    assert comparison.lacks_baselines(runs.trials)
    add_outside_baselines(runs)
    assert runs.settings.prices == PRICES  # read back from the sweep's saved configuration
    frame, downloads = comparison.prepare(runs.trials, runs.outside_baselines, runs.client, runs.settings.prices)
    return runs, frame.set_index("run_id", drop=False), downloads


def row(prepared, store, label):
    return prepared[1].loc[store.ids[label]]


def test_latest_sweep_one_row_per_trial_key(prepared, store):
    runs, frame, _ = prepared
    assert runs.sweep == "syn" and runs.parent_id == store.parent
    assert len(runs.trials) == 23  # 24 runs, the retried key once
    assert store.ids["kv16-first"] not in set(runs.trials["run_id"])
    assert runs.trials["batch_size"].map(type).eq(int).all()  # params get their spec types back
    assert list(runs.outside_baselines["run_id"]) == [store.ids["old-base-b4"]]


def test_speedup_is_against_the_same_workload_on_the_same_gpu(prepared, store):
    assert row(prepared, store, "compiled8")["speedup"] == pytest.approx(0.36 / 0.12)
    assert row(prepared, store, "compiled16")["speedup"] == pytest.approx(1.96 / 0.28)
    assert row(prepared, store, "h100-compiled")["speedup"] == pytest.approx(0.32 / 0.04)  # not L40S's baseline
    assert row(prepared, store, "bf-kv")["speedup"] == pytest.approx(0.5 / 0.1)  # not float32's
    assert row(prepared, store, "kv-b4")["speedup"] == pytest.approx(1.2 / 0.4)  # borrowed from sweep "older"
    assert not row(prepared, store, "kv-b4")["baseline_in_sweep"]


def test_token_verdicts_download_only_differing_pairs(prepared, store):
    frame = prepared[1]
    verdict = {label: frame.at[run_id, "tokens"] for label, run_id in store.ids.items() if run_id in frame.index}
    assert verdict["compiled8"] == "ok" and verdict["pipelined16"] == "ok"
    assert verdict["wrong8"] == "MISMATCH (3/6)"
    assert verdict["nocheck8"] == "ok" and verdict["nocheck16"] == "ok"  # EOS padding past the baseline is fine
    assert verdict["kvnocheck8"] == "MISMATCH (5/6)"
    assert verdict["bf-kv"] == "agree 2/6"  # row 1 differs at step 2, row 0 at step 4: the minimum
    assert verdict["bf-static"] == "ok"
    assert verdict["base8"] == ""
    # wrong8, kvnocheck8, nocheck8, nocheck16, bf-kv and their baselines base8, base16, bf-base
    assert prepared[2] == 8


def test_runtime_against_seqlen_gives_the_growth_exponent(prepared):
    table = article_tables.seqlen_table(prepared[1])
    by_variant = table.set_index(["variant", "batch_size", "dtype", "gpu_type"])
    assert by_variant.loc[("baseline", 2, "float32", "L40S"), "exponent"] == pytest.approx(2.0)
    assert by_variant.loc[("static_compiled", 2, "float32", "L40S"), "exponent"] == pytest.approx(1.0)
    assert by_variant.loc[("baseline", 2, "float32", "L40S"), "n=16"] == pytest.approx(1.96)
    assert by_variant.loc[("baseline", 2, "float32", "L40S"), "steps"] == "6, 14"
    assert by_variant.loc[("static_compiled_nocheck", 2, "float32", "L40S"), "exponent"] == pytest.approx(1.0)
    assert ("kv_cache", 2, "float32", "L40S") in by_variant.index  # kv8 and the retried kv16


def test_pipelining_gain_by_batch_size(prepared):
    table = article_tables.pipelining_table(prepared[1])
    gains = {(r.variant, r.max_seqlen): r.gain_pct for r in table.itertuples()}
    assert gains == {
        ("static_compiled_pipelined", 8): pytest.approx(25.0),
        ("static_compiled_deferred", 8): pytest.approx(20.0),
        ("static_compiled_pipelined", 16): pytest.approx(25.0),
        ("static_compiled_deferred", 16): pytest.approx(20.0),
    }
    assert set(table["sync_variant"]) == {"static_compiled"}


def test_overhead_against_no_check_is_per_step(prepared):
    table = article_tables.nocheck_table(prepared[1]).set_index(["variant", "max_seqlen"])
    compiled = table.loc[("static_compiled", 8)]
    assert compiled["nocheck_variant"] == "static_compiled_nocheck"
    assert compiled["step_ms"] == pytest.approx(20) and compiled["nocheck_step_ms"] == pytest.approx(14)
    assert compiled["overhead_pct"] == pytest.approx(100 * (20 - 14) / 14)
    assert table.loc[("kv_cache", 8), "nocheck_variant"] == "kv_cache_nocheck"


def test_gpu_pivot_and_idle_gap_and_failures(prepared, store):
    pivots = dict(gpu_tables.gpu_tables(prepared[1]))
    runtime = pivots["runtime_mean_s"].set_index(["dtype", "variant", "batch_size", "prompt_len", "max_seqlen"])
    assert list(runtime.columns) == ["H100", "L40S"]
    assert runtime.loc[("float32", "static_compiled", 2, 1, 8)].tolist() == pytest.approx([0.04, 0.12])
    assert len(runtime) == 2  # only the workloads run on both types: baseline and static_compiled, b2 n8

    idle = article_tables.idle_table(prepared[1])
    assert list(idle["variant"]) == ["static_compiled", "static_compiled"]
    assert idle["speedup"].tolist() == pytest.approx([3.0, 7.0])

    failed = article_tables.failed_table(prepared[1])
    assert failed[["variant", "error_type"]].values.tolist() == [
        ["static_cudagraph", "OutOfMemory"],
        ["static_cache_deferred", "Incomplete"],
    ]
    assert failed["error_message"].iloc[0] == "CUDA out of memory. Tried to allocate 2.00 GiB"


def test_report_files_sections_and_attachment(store, tmp_path, capsys):
    assert main(["--uri", store.uri, "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "## (a) Runtime and speedup per trial" in out and "| static_compiled |" in out
    assert f"attached to run {store.parent}" in err
    directory = tmp_path / "syn"
    text = (directory / "report.md").read_text()
    for title in (
        "## System",
        "## Overview per variant",
        "## (a)",
        "## (b) Memory",
        "## (c)",
        "## (d)",
        "## (e)",
        "## (f) runtime_mean_s by GPU type",
        "## Idle gap",
        "## (g) Failed trials",
        "## Plots",
    ):
        assert title in text, title
    assert "| gpu_name | NVIDIA H100 80GB HBM3, NVIDIA L40S |" in text and "| driver | 580.65 |" in text
    assert "1 speedup(s) use a baseline recorded by another sweep" in text
    assert "MISMATCH (3/6)" in text and "agree 2/6" in text and "100.0 MiB" in text and "33.3%" in text
    for png in ("runtime_vs_seqlen.png", "speedup_vs_batch.png", "memory.png"):
        assert (directory / png).read_bytes()[:4] == b"\x89PNG" and f"]({png})" in text
    attached = {a.path for a in store.client.list_artifacts(store.parent, "report")}
    assert {"report/report.md", "report/results.csv", "report/memory.png"} <= attached

    import pandas as pd

    results = pd.read_csv(directory / "results.csv")
    assert len(results) == 23 and results["run_id"].is_unique
    assert {"batch_size", "runtime_mean_s", "env_gpu_name", "speedup", "tokens"} <= set(results.columns)
    assert not any(c.startswith(("params.", "metrics.", "tags.")) for c in results.columns)
    compiled = results.set_index("run_id").loc[store.ids["compiled8"]]
    assert compiled["runtime_mean_s"] == pytest.approx(0.12) and compiled["max_seqlen"] == 8


def test_a_sweep_without_the_rows_shows_only_what_it_can_answer(store, tmp_path):
    report = build_report(store.uri, "tokengen", "older", tmp_path)
    text = (report.directory / "report.md").read_text()
    assert "## (a)" in text and "## (b) Memory" in text
    for absent in (
        "## (c)",
        "## (d)",
        "## (e)",
        "## (f)",
        "## Idle gap",
        "## (g)",
        "runtime_vs_seqlen.png",
        "speedup_vs_batch.png",
    ):
        assert absent not in text, absent
    assert "](memory.png)" in text  # one variant with CUDA memory figures still draws its bars
    assert report.trials == 1 and report.failed == 0 and report.downloads == 0


def test_errors_name_the_fix(store, tmp_path, capsys):
    missing = f"sqlite:///{tmp_path}/none.db"
    assert main(["--uri", missing]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: no sweep in {missing} experiment 'tokengen' (no file {tmp_path}/none.db): "
        "run python -m sweeps.run +grid=smoke first"
    )
    assert not (tmp_path / "none.db").exists()
    assert main(["--uri", store.uri, "--sweep", "nope", "--no-attach"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: no sweep named 'nope' in {store.uri} experiment 'tokengen': "
        "run python -m sweeps.run +grid=smoke sweep.name=nope first, or drop --sweep for the latest"
    )
    assert main(["--uri", store.uri, "--experiment", "other"]) == 2
    assert "(no such experiment)" in capsys.readouterr().err


def test_speedups_carry_an_interval_and_compare_like_with_like(prepared, store):
    compiled = row(prepared, store, "compiled8")
    assert compiled["compared"] == "run" and compiled["significant"] is True
    assert compiled["speedup_low"] < compiled["speedup"] < compiled["speedup_high"]
    assert compiled["interval"] == f"{compiled['speedup_low']:.2f}-{compiled['speedup_high']:.2f}x"
    nocheck = row(prepared, store, "nocheck8")  # 8 steps against its baseline's 6: time per step
    assert nocheck["compared"] == "step"
    assert nocheck["speedup"] == pytest.approx((0.36 / 6) / (0.112 / 8))


def test_cost_per_million_useful_tokens_from_the_sweeps_prices(prepared, store):
    compiled = row(prepared, store, "compiled8")  # L40S at $2/h, 2 x 6 useful tokens in 0.12 s
    assert compiled["cost_per_mtok"] == pytest.approx(2.0 / 3600 / 100 * 1e6)
    side_by_side = gpu_tables.gpu_cost_table(prepared[1]).set_index(
        ["dtype", "variant", "batch_size", "prompt_len", "max_seqlen"]
    )
    compiled_row = side_by_side.loc[("float32", "static_compiled", 2, 1, 8)]
    assert compiled_row["H100 $/Mtok"] == pytest.approx(4.0 / 3600 / (12 / 0.04) * 1e6)
    assert compiled_row["H100 J/token"] == 0.5 and compiled_row["L40S J/token"] == 0.8
    assert compiled_row["L40S tokens/s"] == pytest.approx(100)


def test_prices_match_gpu_names_and_cpu():
    assert comparison.price_of(PRICES, "NVIDIA H100 80GB HBM3", "cuda") == 4.0
    assert comparison.price_of(PRICES, None, "cpu") == 0.1
    assert math.isnan(comparison.price_of(PRICES, "NVIDIA A10G", "cuda"))


def test_a_generate_peer_is_judged_like_any_variant_and_ours_are_timed_against_it(prepared, store):
    peer = row(prepared, store, "hf8")
    assert peer["tokens"] == "ok" and peer["speedup"] == pytest.approx(0.36 / 0.15)
    assert row(prepared, store, "compiled8")["vs_generate"] == pytest.approx(0.12 / 0.15)
    assert row(prepared, store, "kv8")["vs_generate"] == pytest.approx(0.3 / 0.15)
    assert math.isnan(row(prepared, store, "compiled16")["vs_generate"])  # no peer ran at n=16


def test_a_speedup_over_a_baseline_measured_elsewhere_names_the_difference():
    """Two results of different fingerprints are never divided silently: the row names what differs."""
    import pandas as pd

    from tokengen.contract.machine.fingerprint import as_text
    from tracking.report.comparison import REPORT_MATCH, env_vs_baseline
    from tracking.report.figures.baselines import baseline_of

    facts = {
        "device": "cpu X",
        "torch": "2.13.0",
        "transformers": "5.24.0",
        "driver": None,
        "threads": 2,
        "project": "0.1.0",
        "code": "c0de",
        "model_files": "preset",
    }
    point = {
        "model": "tiny",
        "dtype": "float32",
        "device": "cpu",
        "batch_size": 4,
        "max_seqlen": 8,
        "prompt_len": 1,
        "requests": 0,
        "stop": "never",
        "sampling": "greedy",
        "seed": 0,
        "matmul_precision": "highest",
        "gpu_type": None,
        "status": "finished",
        "steps": 8,
        "runtime_mean_s": 1.0,
    }
    frame = pd.DataFrame(
        [
            {**point, "variant": "baseline", "env_facts": as_text(facts)},
            {**point, "variant": "kv_cache", "env_facts": as_text({**facts, "threads": 1})},
            {**point, "variant": "static_cache", "env_facts": as_text({**facts, "code": "5ca1ed"})},
            {**point, "variant": "compiled", "env_facts": as_text(facts)},
        ]
    )
    named = env_vs_baseline(frame, baseline_of(frame, match=REPORT_MATCH))
    assert named == ["", "threads 1 vs 2", "code 5ca1ed vs c0de", ""]  # a changed decode loop is named too


def test_every_declared_check_has_its_rows_in_tables_d_and_e(tmp_path):
    """Tables (d) and (e) find their rows from the checks' declared families: a check that is declared
    gets its rows with no change to the tables (each lagged beside sync, each checked beside none)."""
    lagged = in_family("stop_check", LAGGED)
    s = Store(tmp_path)
    s.start_sweep("checks")
    s.trial("base", "baseline", runtime=0.4, tokens=B8)
    s.trial("sync", "static_compiled", runtime=0.12, tokens=B8)
    s.trial("none", "static_compiled_nocheck", runtime=0.08, tokens=padded(B8, 8))
    names = [label_for({**VARIANTS["static_compiled"], "stop_check": check}) for check in lagged]
    for i, (check, name) in enumerate(zip(lagged, names)):
        s.trial(check, name, runtime=0.1 - 0.001 * i, tokens=B8)
    runs = load_sweep(s.uri, "tokengen", None)
    frame, _ = comparison.prepare(runs.trials, runs.outside_baselines, runs.client, PRICES)
    gains = {r.variant: r.gain_pct for r in article_tables.pipelining_table(frame).itertuples()}
    assert gains == {name: pytest.approx(100 * (0.02 + 0.001 * i) / 0.12) for i, name in enumerate(names)}
    bounded = set(article_tables.nocheck_table(frame)["variant"])
    assert bounded == {"static_compiled", *gains}
