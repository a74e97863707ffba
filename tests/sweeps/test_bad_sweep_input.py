"""Bad sweep input stops the sweep with one line that names the fix, exit 2, before Ray starts and
before anything is written to the store: configs from `hydra.compose`, run through `run_sweep`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import ray
from sweep_helpers import small_sweep

from sweeps.driver import run_sweep


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    yield
    ray.shutdown()


def refused(config: dict, capsys) -> str:
    """The one line of a refused sweep, after checking it was refused before anything started."""
    assert run_sweep(config) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert not ray.is_initialized()
    return lines[0]


POINT = "error: grid point {'variant': 'baseline', 'batch_size': 2, 'max_seqlen': 6"  # the small sweep's first


@pytest.mark.parametrize(
    "override, line",
    [
        ("+grid.colour=[red]", "error: grid axis 'colour' is not a trial field: use one of "),
        ("grid.batch_size=[two]", "error: grid axis 'batch_size': batch_size='two' is not a valid int: fix the value"),
        ("grid.batch_size=[]", "error: grid axis 'batch_size' has no values: give it at least one"),
        ("grid.batch_size=[1.5]", "error: grid axis 'batch_size': batch_size=1.5 is not a valid int (a whole number)"),
        ("grid.max_seqlen=[8.9]", "error: grid axis 'max_seqlen': max_seqlen=8.9 is not a valid int (a whole number)"),
        (
            "grid.batch_size=[true]",
            "error: grid axis 'batch_size': batch_size=True is not a valid int (a whole number)",
        ),
        (
            "tracking.uri=ftp://x",
            "error: tracking.uri=ftp://x has scheme 'ftp', which MLflow cannot store runs in: "
            "use sqlite:///PATH, http(s)://HOST:PORT",
        ),
        (
            "tracking.uri=file:///tmp/mlruns",
            "error: tracking.uri=file:///tmp/mlruns is MLflow's file store, which "
            "MLflow 3 refuses without MLFLOW_ALLOW_FILE_STORE=true: use "
            "tracking.uri=sqlite:///mlflow.db",
        ),
        ("tracking.uri=./mlruns", "error: tracking.uri=./mlruns is MLflow's file store"),
        ("+grid.request_rate=[-1]", f"{POINT}, 'request_rate': -1}}: request_rate=-1.0: give requests per second"),
        ("+grid.burstiness=[0]", f"{POINT}, 'burstiness': 0}}: burstiness=0.0: give a gamma shape above 0"),
    ],
    ids=[
        "unknown-axis",
        "wrong-type",
        "empty-axis",
        "float-batch",
        "float-seqlen",
        "bool-batch",
        "unknown-scheme",
        "file-store",
        "bare-path",
        "negative-rate",
        "burstiness-0",
    ],
)
def test_bad_input_is_one_line_before_ray(tmp_path, capsys, override, line):
    line_seen = refused(small_sweep(tmp_path, override, seeded=False), capsys)
    assert line_seen.startswith(line), line_seen
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()  # no store made


def test_a_grid_over_max_trials_is_refused_before_it_is_expanded(tmp_path, capsys):
    config = small_sweep(tmp_path)
    config.grid["seed"] = list(range(50_001))  # 2 variants x 1 x 1 x 50,001 seeds = 100,002 points
    started = time.perf_counter()
    line = refused(config, capsys)
    assert line == (
        "error: the grid has 100,002 points, more than sweep.max_trials=100000: narrow its axes, "
        "or raise sweep.max_trials to run them all"
    )
    assert time.perf_counter() - started < 5  # counted, not expanded (expanding resolves 100,002 specs)
    assert refused(small_sweep(tmp_path, "sweep.max_trials=1"), capsys).startswith("error: the grid has 2 points")


def test_an_unwritable_working_directory_is_refused_before_the_store_is_touched(tmp_path, capsys, monkeypatch):
    cwd = tmp_path / "read-only"
    cwd.mkdir()
    cwd.chmod(0o555)
    if os.geteuid() == 0:  # root writes through file modes: run from a read-only filesystem instead
        cwd = Path("/proc")
    monkeypatch.chdir(cwd)
    try:
        line = refused(small_sweep(tmp_path, seeded=False), capsys)
    finally:
        (tmp_path / "read-only").chmod(0o755)
    assert line.startswith(f"error: cannot write the sweep's journal under {cwd} (")
    assert line.endswith("): run the sweep from a writable directory")
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize(
    "override, line",
    [
        ("sweep.name=..", "error: sweep.name='..': use a name of letters"),
        ("sweep.name=.", "error: sweep.name='.': use a name of letters"),
        ("sweep.name=" + "x" * 300, "error: sweep.name='xxxx"),
        ("sweep.trial_timeout_s=0", "error: sweep.trial_timeout_s=0: give a timeout in seconds above 0"),
        ("sweep.trial_timeout_s=-5", "error: sweep.trial_timeout_s=-5"),
        ("sweep.cpus_per_trial=-2", "error: sweep.cpus_per_trial=-2: give 1 or more CPUs"),
        ("sweep.retries=-1", "error: sweep.retries=-1: give 0 or more retries"),
        ("sweep.inductor_cache=bogus", "error: sweep.inductor_cache='bogus': use one of shared, cold"),
        ("sweep.prices=oops", "error: sweep.prices='oops': give USD per device-hour by type"),
        ("sweep.slo_percentile=101", "error: sweep.slo_percentile=101.0: give the percentile of requests held to"),
        (
            "tracking.uri=http://user:hunter2@127.0.0.1:9",
            "error: tracking.uri carries credentials: use tracking.uri=http://127.0.0.1:9 and put them in",
        ),
    ],
    ids=[
        "dotdot",
        "dot",
        "long",
        "timeout-0",
        "timeout-negative",
        "cpus",
        "retries",
        "inductor",
        "prices",
        "slo-percentile",
        "uri-creds",
    ],
)
def test_every_sweep_setting_is_checked_in_one_line(tmp_path, capsys, override, line):
    seen = refused(small_sweep(tmp_path, override, seeded=False), capsys)
    assert seen.startswith(line), seen
    assert "hunter2" not in seen
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / ".sweeps" / "journal").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing written where the sweep runs"


def test_a_request_trace_that_is_not_a_csv_of_numbers_is_one_line_before_ray(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    trace.write_text("0.0,8,4\n0.5,eight,4\n")
    overrides = ("grid.variant=[static_cache]", "trial.requests=2", "trial.stop=never", f"trial.request_trace={trace}")
    line = refused(small_sweep(tmp_path, *overrides, seeded=False), capsys)
    assert line.startswith("error: grid point {") and line.endswith(
        f"request_trace={trace} row 2 is '0.5,eight,4': give a CSV of numbers, one request a row: "
        "arrival time (s), prompt length, output length"
    ), line


def test_cuda_trials_on_a_machine_without_a_gpu_are_refused_before_ray_and_leave_no_journal(tmp_path, capsys):
    started = time.perf_counter()
    line = refused(small_sweep(tmp_path, "trial.device=cuda"), capsys)
    assert line == (
        "error: the grid has CUDA trials but this machine has no GPU for a local Ray: use "
        "trial.device=cpu, or ray.address=auto on a GPU cluster"
    )
    assert time.perf_counter() - started < 10
    assert not list((tmp_path / ".sweeps").rglob("*.jsonl"))


def test_a_workdir_that_cannot_be_made_is_refused_before_ray(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    workdir = f"{tmp_path}/a-file/work"
    line = refused(small_sweep(tmp_path, f"sweep.workdir={workdir}", seeded=False), capsys)
    assert line == (
        f"error: sweep.workdir={workdir} cannot be used: Not a directory: give a writable directory of your own, "
        "e.g. sweep.workdir=~/.cache/tokengen/sweeps"
    )
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / ".sweeps").exists()


def test_a_batch_beyond_the_vocabulary_that_cannot_have_distinct_prompts_is_refused(tmp_path, capsys):
    line = refused(small_sweep(tmp_path, "grid.batch_size=[50258]", "trial.prompt_len=2"), capsys)
    assert line.endswith(
        "batch_size=50258 with prompt_len=2 wants more distinct prompts than model 'tiny' has ids "
        "(50257): use prompt_len >= 3, prompt_len=1 (BOS only) or batch_size <= 50257"
    ), line


@pytest.mark.parametrize(
    "overrides, line",
    [
        (
            ("trial.quant=int4",),
            "error: trial.quant=int4 is dropped: the grid's variant baseline sets every knob, quant=none among them: "
            "make it an axis, grid.quant=[int4] (an axis applies after the variant)",
        ),
        (
            ("grid.variant=null", "trial.variant=kv_cache", "trial.cache=static"),
            "error: trial.cache=static is dropped: trial.variant=kv_cache sets every knob, cache=dynamic among them: "
            "make it an axis, grid.cache=[static] (an axis applies after the variant)",
        ),
    ],
    ids=["knob-under-variant-axis", "knob-under-trial-variant"],
)
def test_a_trial_knob_a_variant_sets_again_is_refused_not_dropped(tmp_path, capsys, monkeypatch, overrides, line):
    """`trial.quant=int4` beside `grid.variant=[...]` ran every trial without int4 and said nothing. The planner
    refuses it wherever the value came from (a preset sets every knob: it is never used); a command line's setting
    that an axis overrides is refused before Hydra (tests/sweeps/test_command_line.py)."""

    def execute(*args, **kwargs):
        raise AssertionError("the sweep ran its trials without the setting")

    monkeypatch.setattr("sweeps.driver.execute", execute)  # a guard let through: a failure now, not a sweep
    assert refused(small_sweep(tmp_path, *overrides, seeded=False), capsys) == line


@pytest.mark.parametrize(
    "overrides, field, value",
    [
        (("trial.batch_size=2", "trial.seed=3"), "seed", 3),  # the axis's own batch; no axis sets the seed
        (("grid.variant=[kv_cache]", "trial.cache=dynamic"), "cache", "dynamic"),  # the preset's own value
        (("trial.quant=int8", "grid.quant=[int8]"), "quant", "int8"),  # an axis of the same value, after the variant
        (("grid.variant=[custom]", "trial.cache=static"), "cache", "static"),  # custom sets no knob: trial's are used
        (("+grid.model=[llama-tiny]",), "model", "llama-tiny"),  # an axis narrowing the grid file's trial.model=tiny
    ],
    ids=["axis-agrees", "preset-agrees", "knob-axis", "custom", "grid-file-value"],
)
def test_a_trial_setting_no_point_overrides_is_kept(tmp_path, overrides, field, value):
    """Only what a point really overrides is refused: by the command line's check and the planner's alike."""
    from sweep_helpers import small_overrides

    from sweeps.planning.entry_errors import command_line_problem
    from sweeps.planning.grid import plan_sweep

    assert command_line_problem([*small_overrides(tmp_path), *overrides]) is None
    trials = plan_sweep(small_sweep(tmp_path, *overrides, seeded=False)).trials
    assert {getattr(t.spec, field) for t in trials} == {value}
