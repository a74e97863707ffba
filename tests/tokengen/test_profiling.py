"""Profiling: trace parsing on fixtures shaped like real exports, the torch path end to end into
MLflow, and the checks that stop a sweep before it starts."""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import ray
from mlflow import MlflowClient
from sweep_helpers import child_runs, small_sweep

from sweeps.driver import run_sweep
from sweeps.planning.grid import plan_sweep
from tokengen.cli import main
from tokengen.measure.profiler.nsys import nsys_command, nsys_shortfall, strip_option
from tokengen.measure.profiler.traces import Timeline, derive, from_nsys_sqlite, from_torch_trace
from tokengen.measure.profiler.window import clip_window

# Three steps on the host; GPU work 0-80, 100-180, 200-280 (us): 20 us idle between steps, the
# host blocked 70 us in each stop check. A second kernel in step 1 is launched late (host ran ahead).
STEPS = [(0, 0.0, 95.0), (1, 95.0, 195.0), (2, 195.0, 295.0)]
CHECKS = [(20.0, 90.0), (120.0, 190.0), (220.0, 290.0)]
LAUNCHES = {1: 5.0, 2: 100.0, 3: 150.0, 4: 200.0}
GPU_OPS = [(0.0, 80.0, 1), (100.0, 150.0, 2), (150.0, 180.0, 3), (200.0, 280.0, 4)]
EXPECTED = {
    "gpu_idle_us_per_step": 20.0,
    "gpu_busy_pct": 100.0 * 240 / 280,
    "host_sync_us_per_step": 70.0,
    "profiled_steps": 3,
}


def test_derive_attributes_gpu_work_to_steps_by_launch():
    assert derive(Timeline(STEPS, CHECKS, LAUNCHES, GPU_OPS)) == pytest.approx(EXPECTED)


def test_torch_chrome_trace(tmp_path):
    events = [{"ph": "X", "cat": "user_annotation", "name": f"step {i}", "ts": s, "dur": e - s} for i, s, e in STEPS]
    events += [{"ph": "X", "cat": "user_annotation", "name": "stop check", "ts": s, "dur": e - s} for s, e in CHECKS]
    events += [{"ph": "X", "cat": "user_annotation", "name": "forward", "ts": 1.0, "dur": 3.0}]
    events += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t, "dur": 2.0, "args": {"correlation": c}}
        for c, t in LAUNCHES.items()
    ]
    events += [
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": s, "dur": e - s, "args": {"correlation": c}}
        for s, e, c in GPU_OPS
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert derive(from_torch_trace(path)) == pytest.approx(EXPECTED)


def test_nsys_sqlite_export(tmp_path):
    """Tables and columns as `nsys export --type=sqlite` writes them (nanoseconds, NVTX text by id)."""
    path = tmp_path / "profile.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
            rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
            textId INTEGER REFERENCES StringIds(id), domainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
            globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
            contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
            shortName INTEGER);
    """)
    names = {"stop check": 1, "forward": 2}
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(v, k) for k, v in names.items()])
    for i, s, e in STEPS:  # step names inline, the check's by id: nsys does both
        db.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text) VALUES (?, ?, 59, ?)",
            (s * 1e3, e * 1e3, f"step {i}"),
        )
    for s, e in CHECKS:
        db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, textId) VALUES (?, ?, 59, 1)", (s * 1e3, e * 1e3))
    db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, textId) VALUES (1000, NULL, 34, 2)")  # a mark
    for c, t in LAUNCHES.items():
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, correlationId) VALUES (?, ?, ?)",
            (t * 1e3, t * 1e3 + 2e3, c),
        )
    for s, e, c in GPU_OPS:
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, correlationId) VALUES (?, ?, ?)", (s * 1e3, e * 1e3, c)
        )
    db.commit()
    db.close()
    assert derive(from_nsys_sqlite(path)) == pytest.approx(EXPECTED)


def test_nsys_command_line_is_the_articles():
    cmd = nsys_command("nsys", ["python", "-m", "tokengen"], tmp := __import__("pathlib").Path("/x/profile"), "cuda")
    assert cmd[:2] == ["nsys", "profile"]
    assert "--capture-range=cudaProfilerApi" in cmd and "--trace=cuda,nvtx,osrt" in cmd
    assert f"--output={tmp}" in cmd and cmd[-3:] == ["python", "-m", "tokengen"]
    assert strip_option(["--a", "1", "--json", "x", "--json=y", "--b"], "--json") == ["--a", "1", "--b"]


def test_window_is_the_articles_and_clips_to_short_runs():
    assert clip_window("30-50", 100) == (30, 50)
    assert clip_window("30-50", 40) == (20, 40)
    assert clip_window("30-50", 8) == (0, 8)


@pytest.mark.parametrize("argv, message", [(["--profile-steps", "50-30"], "profile_steps='50-30' is not understood")])
def test_profile_input_errors(argv, message, capsys):
    assert main(["--model", "tiny", *argv]) == 2
    assert message in capsys.readouterr().err


def test_nsys_is_the_trial_hosts_to_find(tmp_path, monkeypatch):
    """A sweep's driver need not have nsys (a cluster's GPU nodes do): the plan keeps profile=nsys trials and
    runs nothing (a CPU trial's nsys is allowed by the rules: tests/tokengen/test_nsys.py)."""
    monkeypatch.setenv("PATH", "/nonexistent")  # no nsys, whatever this machine has
    plan = plan_sweep(small_sweep(tmp_path, "trial.device=cuda", "trial.profile=nsys"))
    assert plan.trials and {t.spec.profile for t in plan.trials} == {"nsys"}
    assert not ray.is_initialized()


def test_nsys_shortfall_says_why_torch_profiles_instead(tmp_path):
    """Where nsys is missing, fails, is ended past its bound, or leaves nothing to convert, the trial is profiled
    by torch.profiler and its record says why; a report, a stream kept for a later conversion, or a batch that
    ended before the window, needs nothing else."""
    assert nsys_shortfall(None, None, tmp_path) == "nsys is not on this host's PATH"
    assert nsys_shortfall(3, None, tmp_path) == "the trial under nsys exited with status 3"
    (tmp_path / "profile.sqlite").write_bytes(b"x")
    assert nsys_shortfall(0, {"profile_window": "30-50"}, tmp_path) == "nsys wrote no report (only profile.sqlite)"
    assert nsys_shortfall(0, {"profile_window": "30-50", "profile_report": "profile.nsys-rep"}, tmp_path) is None
    assert nsys_shortfall(0, {"profile_window": "none"}, tmp_path) is None
    ended = {"profile_window": "30-50", "profile_note": "nsys had not ended 60 s after the trial's process ended"}
    assert nsys_shortfall(0, ended, tmp_path).startswith(ended["profile_note"])
    (tmp_path / "profile.qdstrm").write_bytes(b"x")  # kept for a later conversion, its record's note says how
    assert nsys_shortfall(0, {"profile_window": "30-50", "profile_note": "nsys left profile.qdstrm"}, tmp_path) is None


@pytest.mark.slow
def test_torch_profile_end_to_end_into_mlflow(tmp_path, warm_ray):
    config = small_sweep(
        tmp_path, "trial.profile=auto", "trial.stop=never", "grid.variant=[kv_cache]", "grid.max_seqlen=[12]"
    )
    assert run_sweep(config) == 0
    (run,) = child_runs(config.tracking.uri)
    assert run.data.params["profile"] == "torch"  # auto, on a CPU trial
    assert run.data.metrics["host_sync_us_per_step"] > 0
    assert run.data.metrics["profiled_steps"] == 12  # the window clipped to the whole run
    client = MlflowClient(tracking_uri=config.tracking.uri)
    assert "profile_trace.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
    trace = json.loads(open(client.download_artifacts(run.info.run_id, "profile_trace.json", str(tmp_path))).read())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"step 0", "forward", "stop check"} <= names


NSYS_BOUND_S = 60  # what nsys may add to a trial: the re-run's imports, nsys's start, its stream, conversion, stats


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not installed (Debian: nsight-systems, docs/results.md)")
def test_a_cpu_trial_under_real_nsys_ends_and_records_its_report(tmp_path, warm_ray):
    """A sweep's CPU trial under real nsys: it ends within NSYS_BOUND_S of its own work (with CPU sampling on, nsys's
    agent never ended here, compiled or not: a plain Python loop hung 4 times in 6), its stream is converted by the
    importer beside this nsys, the report and its CSV summaries are the run's artifacts and named in its tags, and no
    nsys process is left. Eager, so the suite pays no compile: docs/results.md has the compiled trial's figures."""
    config = small_sweep(
        tmp_path, "trial.profile=nsys", "grid.variant=[static_cache]", "grid.batch_size=[1]", "trial.runs=1"
    )
    assert run_sweep(config) == 0
    (run,) = child_runs(config.tracking.uri)
    tags, metrics = run.data.tags, run.data.metrics
    assert run.data.params["profile"] == "nsys" and "profile_note" not in tags, tags.get("profile_note")
    assert metrics["child_wall_s"] - metrics["trial_wall_s"] < NSYS_BOUND_S
    assert tags["profile_report"] == "profile.nsys-rep" and "profile_osrt.csv" in tags["profile_summaries"].split(",")
    client = MlflowClient(tracking_uri=config.tracking.uri)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"profile.nsys-rep", *tags["profile_summaries"].split(",")} <= artifacts
    osrt = Path(client.download_artifacts(run.info.run_id, "profile_osrt.csv", str(tmp_path)))
    rows = list(csv.DictReader(osrt.open()))
    assert rows and {"Name", "Num Calls"} <= set(rows[0])  # the OS runtime calls the trial made
    (parent,) = [r for r in client.search_runs([run.info.experiment_id]) if "sweep_parent" in r.data.tags]
    report = Path(client.download_artifacts(parent.info.run_id, "report/report.md", str(tmp_path))).read_text()
    link = f"[profile.nsys-rep]({run.info.artifact_uri}/profile.nsys-rep)"
    assert "## Nsight Systems reports" in report and link in report  # the report links the trial's report file
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _started_under(p, tmp_path)]


def _started_under(proc: Path, folder: Path) -> bool:
    """A live process whose TMPDIR is nsys's own under `folder` (nsys, its launcher, its agent)."""
    try:
        if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
        env = (proc / "environ").read_bytes().split(b"\0")
    except (OSError, IndexError):
        return False
    return any(v.startswith(f"TMPDIR={folder}".encode()) and v.endswith(b"/nsys-tmp") for v in env)


def test_a_batch_that_ends_before_the_window_profiles_nothing_and_still_records(tmp_path):
    trace = tmp_path / "profile_trace.json"
    trace.write_text("{}")  # a stale trace from an earlier run must not be read
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "--model",
                "tiny",
                "--variant",
                "kv_cache",
                "--batch-size",
                "1",
                "--max-seqlen",
                "40",
                "--stop",
                "fixed:3",
                "--runs",
                "1",
                "--profile",
                "torch",
                "--profile-dir",
                str(tmp_path),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(out.read_text())
    assert record["profile_window"] == "none" and record["profiled_steps"] == 0
    assert record["gpu_idle_us_per_step"] is None and record["host_sync_us_per_step"] is None
    assert not trace.exists()


def test_torch_trace_counts_driver_launches():
    """Triton kernels are launched through the driver API (cuLaunchKernel), not the runtime."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "step 0", "ts": 0, "dur": 10},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": 1, "dur": 1, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "triton_", "ts": 3, "dur": 4, "args": {"correlation": 7}},
    ]
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"traceEvents": events}, f)
    timeline = from_torch_trace(f.name)
    assert timeline.launches == {7: 1.0} and len(timeline.gpu_ops) == 1


def test_a_generate_peer_is_profiled_over_the_same_steps_as_our_loop(tmp_path):
    """profile=torch on transformers' generate(): its steps carry the same ranges as ours, so the
    window and the per-step figures compare the two loops at the same point."""
    records = {}
    for variant in ("kv_cache", "hf_generate"):
        out = tmp_path / f"{variant}.json"
        assert (
            main(
                [
                    "--model",
                    "tiny",
                    "--variant",
                    variant,
                    "--batch-size",
                    "2",
                    "--max-seqlen",
                    "12",
                    "--prompt-len",
                    "4",
                    "--runs",
                    "1",
                    "--warmup",
                    "0",
                    "--profile",
                    "torch",
                    "--profile-steps",
                    "4-9",
                    "--profile-dir",
                    str(tmp_path / variant),
                    "--json",
                    str(out),
                ]
            )
            == 0
        )
        records[variant] = json.loads(out.read_text())
    ours, peer = records["kv_cache"], records["hf_generate"]
    assert peer["profile_window"] == ours["profile_window"] == "4-9"
    assert peer["profiled_steps"] == ours["profiled_steps"] == 5
    trace = json.loads((tmp_path / "hf_generate" / "profile_trace.json").read_text())
    steps = sorted(
        e["name"]
        for e in trace["traceEvents"]
        if e.get("cat") == "user_annotation" and e.get("name", "").startswith("step ")
    )
    assert steps == [f"step {i}" for i in range(4, 9)]


def test_an_engine_without_step_ranges_says_why_it_has_no_profile(tmp_path):
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "--model",
                "tiny",
                "--variant",
                "hf_generate_batch",
                "--requests",
                "4",
                "--batch-size",
                "2",
                "--max-seqlen",
                "6",
                "--prompt-len",
                "4",
                "--stop",
                "fixed:3",
                "--runs",
                "1",
                "--warmup",
                "0",
                "--profile",
                "torch",
                "--profile-dir",
                str(tmp_path),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(out.read_text())
    assert record["profile_window"] is None and "thread of its own" in record["profile_skipped"]
