"""Bad input is one line and exit 2 before any work starts: a grid whose `exclude` or `blocks` is not a list
of mappings, a grid file that is not YAML, a dry run of trials the memory guard refuses on this machine's
own devices (marked in its plan), a pickled `.bin` torch refuses, outputs that cannot be written (a
read-only working directory, hydra.run.dir, `--json`, `--out`: a real read-only tmpfs), and a store write
that fails (its SQLAlchemy traceback in the sweep's log, not on the terminal)."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest
from disk_helpers import tmpfs
from sweep_helpers import small_sweep, store_left_by

from sweeps.driver import run_sweep
from sweeps.planning.entry_errors import command_line_problem
from tokengen.cli import main as cli_main
from tracking.compare.__main__ import main as compare_main
from tracking.report.__main__ import main as report_main

SMALL = ("--model", "tiny", "--runs", "1", "--warmup", "0", "--max-seqlen", "2", "--batch-size", "1")
HUGE = ("grid.batch_size=[100000]", "trial.prompt_len=1")  # 160 GB of logits for the tiny model's baseline


def err_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    "override, line",
    [
        (
            "+grid.exclude=5",
            "error: grid.exclude=5 is not a list of rules (each a mapping of trial fields to values): "
            "write it as grid.exclude='[{cache: none, batch_size: 1}]' (quoted in a shell)",
        ),
        (
            "+grid.blocks=foo",
            "error: grid.blocks='foo' is not a list of sub-grids (each a mapping of axes to values): "
            "write it as grid.blocks='[{batch_size: [1,2]}]' (quoted in a shell)",
        ),
    ],
    ids=["exclude", "blocks"],
)
def test_a_malformed_grid_is_one_line(tmp_path, monkeypatch, capsys, override, line):
    monkeypatch.chdir(tmp_path)
    for dry in ("false", "true"):
        assert run_sweep(small_sweep(tmp_path, override, f"sweep.dry_run={dry}")) == 2
        assert err_line(capsys) == line


def test_a_grid_file_that_is_not_yaml_is_one_line(tmp_path):
    (tmp_path / "grid").mkdir()
    (tmp_path / "grid" / "mine.yaml").write_text("variant: [baseline\nbatch_size: {\n")
    line = command_line_problem(["--config-dir", str(tmp_path), "+grid=mine"])
    assert line == (
        f"{tmp_path}/grid/mine.yaml is not valid YAML (line 2, column 11: expected ',' or ']', but got "
        "':'): fix the file"
    ), line


def test_the_dry_run_marks_what_the_memory_guard_refuses_here_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run_sweep(small_sweep(tmp_path, *HUGE, "sweep.dry_run=true")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: trial ") and " GB of host memory " in err[-1], err
    assert (
        "memory: a real run would refuse 2 trial(s) on this machine: " in (tmp_path / "reports/t/plan.md").read_text()
    )


def test_a_dry_run_over_the_budget_writes_its_plan_and_ends_with_the_refusal_exit_2(tmp_path, monkeypatch, capsys):
    """`+grid=full sweep.max_device_hours=0.001 sweep.dry_run=true` exited 0, its refusal line 230 of 238: a script
    (or a person reading the end) took the plan for one that would run."""
    monkeypatch.chdir(tmp_path)
    assert run_sweep(small_sweep(tmp_path, "sweep.max_device_hours=0.000001", "sweep.dry_run=true", seeded=False)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: the sweep's estimate is ") and [e for e in err if e.startswith("error:")] == [
        err[-1]
    ], err
    assert err[-1].endswith(
        "over sweep.max_device_hours=1e-06: see it trial by trial in reports/t/plan.md, then narrow the grid or "
        "raise the limit"
    ), err[-1]
    assert (tmp_path / "reports/t/plan.csv").exists()  # the plan, still written
    assert "A real run would be refused: " in (tmp_path / "reports/t/plan.md").read_text()


def test_a_dry_run_for_devices_this_machine_lacks_still_prices(tmp_path, monkeypatch, capsys):
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has a GPU: its CUDA trials are its own")
    monkeypatch.chdir(tmp_path)
    assert (
        run_sweep(
            small_sweep(
                tmp_path,
                *HUGE[1:],
                "trial.device=cuda",
                "sweep.dry_run=true",
                "grid.variant=[kv_cache]",
                "grid.batch_size=[4096]",
            )
        )
        == 0
    ), capsys.readouterr().err


def test_a_bin_torch_refuses_is_one_line_and_runs_none_of_it(tmp_path, capsys):
    from tokengen.models import build_model

    folder, marker = tmp_path / "ckpt", tmp_path / "ran"
    build_model("tiny", "float32", "cpu", 0).save_pretrained(folder)
    (folder / "model.safetensors").unlink()
    capsys.readouterr()  # the save's progress bar

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"weight": Payload()}))
    assert (
        cli_main(
            [
                "--model",
                str(folder),
                "--device",
                "cpu",
                "--runs",
                "1",
                "--warmup",
                "0",
                "--max-seqlen",
                "2",
                "--batch-size",
                "1",
            ]
        )
        == 2
    )
    assert err_line(capsys).startswith(f"error: model path {str(folder)!r}: torch refused its pickled .bin weights")
    assert not marker.exists()


@pytest.fixture(scope="module")
def recorders_store(tmp_path_factory) -> Path:
    """A store the Recorder opened, by a process that then ended (an open database keeps its disk busy)."""
    code = "import sys; from tracking.store.recorder import Recorder; Recorder(sys.argv[1], 'tokengen')"
    return store_left_by(tmp_path_factory.mktemp("store"), code)


@pytest.fixture
def read_only(recorders_store, tmp_path):
    """A real read-only filesystem: a tmpfs remounted ro (root, as for the full-disk tests), a store on it."""
    with tmpfs(tmp_path / "ro", "8m") as disk:
        shutil.copyfile(recorders_store, disk / "mlflow.db")
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
        if remounted.returncode:
            pytest.skip(f"cannot remount a tmpfs read-only here ({remounted.stderr.strip()})")
        yield disk


def test_outputs_that_cannot_be_written_are_one_line(read_only, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(read_only)
    assert command_line_problem(["+grid=smoke"]) == (
        f"cannot write Hydra's run folder outputs: {read_only} cannot be "
        "written (Read-only file system): run the sweep from a writable "
        "directory"
    )
    monkeypatch.chdir(tmp_path)
    assert command_line_problem(["+grid=smoke", f"hydra.run.dir={read_only}/run"]).endswith(
        "(Read-only file system): give a writable hydra.run.dir=DIR"
    )
    assert cli_main([*SMALL, "--json", f"{read_only}/r.json"]) == 2
    assert err_line(capsys) == (
        f"error: cannot write --json {read_only}/r.json: {read_only} cannot be written "
        "(Read-only file system): give another path"
    )
    for main in (lambda out: report_main(["--out", out]), lambda out: compare_main(["a", "b", "--out", out])):
        assert main(f"{read_only}/reports") == 2
        assert err_line(capsys).endswith("cannot be written (Read-only file system): give another folder")
    (tmp_path / "a-file").write_text("")
    assert cli_main([*SMALL, "--json", str(tmp_path)]) == 2
    assert err_line(capsys).endswith(f"{tmp_path} is a folder, not a file: give another path")
    assert report_main(["--out", str(tmp_path / "a-file" / "reports")]) == 2
    assert err_line(capsys).endswith(f"{tmp_path / 'a-file'} is a file, not a folder: give another folder")


def test_a_store_write_that_fails_is_one_line_naming_the_log(read_only, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run_sweep(small_sweep(tmp_path, f"tracking.uri=sqlite:///{read_only}/mlflow.db")) == 2
    line = err_line(capsys)  # without the log's routing: some 80 lines of SQLAlchemy's traceback first
    assert line.startswith(
        f"error: cannot write to tracking store sqlite:///{read_only}/mlflow.db ((sqlite3."
        "OperationalError) unable to open database file): make it writable"  # a WAL store: no -wal, -shm there
    ), line
    assert line.endswith("(details: .sweeps/logs/tokengen/t.log)")
    assert "Traceback" in (tmp_path / ".sweeps/logs/tokengen/t.log").read_text()  # the details the line names


def test_the_single_trial_cli_asks_the_sweeps_memory_guard(capsys):
    """`python -m tokengen --batch-size 100000`: without the guard, minutes of work and a traceback."""
    assert cli_main(["--model", "tiny", "--batch-size", "100000", "--prompt-len", "1", "--runs", "1"]) == 2
    line = err_line(capsys)
    assert line.startswith("error: trial ") and " GB of host memory (weights " in line, line
    assert " over --memory-guard 0.9 of the " in line
    assert line.endswith("free: lower --batch-size, or pass --memory-guard 0 to run it anyway"), line
