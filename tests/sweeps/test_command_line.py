"""The sweep's command line before `hydra.main` sees it (sweeps/planning/entry_errors.py): each config error
Hydra itself would report in 5-15 lines and exit 1 is one line naming the key and the fix, exit 2,
and Hydra writes no run folder; a server URI carrying a password is refused before it reaches a file
or a printed line; a command line that composes, and Hydra's own modes, go on to Hydra untouched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sweep_helpers import driver_environment, small_overrides

from sweeps.planning.entry_errors import command_line_problem, refuse_bad_command_line

GRIDS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "conf" / "grid").glob("*.yaml"))

SECRET = "s3cret-Pa55"
FIELDS = "use one of variant, model, dtype, device, batch_size, max_seqlen, cache, compile, stop_check, allocator, "


@pytest.mark.parametrize(
    "argv, line",
    [
        (["+grid=smoke", "trial.bogus=1"], "trial.bogus is not a trial field: " + FIELDS),
        (
            ["+grid=smoke", "trial.batch_size=abc"],
            "trial.batch_size='abc': give a whole number, e.g. trial.batch_size=32",
        ),
        (
            ["+grid=nope"],
            f"+grid=nope: no grid named 'nope': use one of {', '.join(GRIDS)} (conf/grid/), or add nope.yaml there",
        ),
        (
            ["+grid=smoke", "grid.batchsize=[1]"],
            "grid axis 'batchsize' is not a trial field: did you mean batch_size? "
            "(use one of allocator, attention, batch_size, ",
        ),
        (
            ["+grid=smoke", "sweep.name=smöke"],
            "cannot read the override sweep.name=smöke at 'ö' (character 14): "
            "Hydra's override grammar reads unquoted only ASCII letters",
        ),
        (["+grid=smoke", "grid.seed=[1,2]"], "grid.seed is not an axis of this grid: add it with +grid.seed=[...]"),
        (
            ["+grid=smoke", "sweep.nmae=x"],
            "sweep.nmae is not a sweep setting: did you mean sweep.name? (use one of name, ",
        ),
        (["+grid=smoke", "sweep.resume=maybe"], "sweep.resume='maybe': give true or false, e.g. sweep.resume=true"),
        (["+grid=smoke", "+grid=full"], "+grid= is given more than once: keep one +grid=NAME"),
        (
            ["+grid=smoke", "grid.batch_size=[1,2"],
            "cannot read the override grid.batch_size=[1,2 (no viable alternative at input '[1,2'): close its brackets",
        ),
        (
            ["--cfg", "job", f"tracking.uri=http://user:{SECRET}@127.0.0.1:5000"],
            "tracking.uri carries credentials: use tracking.uri=http://127.0.0.1:5000 and put them in "
            "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD",
        ),
        (
            ["+grid=smoke", "tracking.uri=${oc.env:TOKENGEN_TEST_URI}"],  # only the composed config carries it
            "tracking.uri carries credentials: use tracking.uri=https://mlflow.lab and put them in",
        ),
    ],
    ids=[
        "unknown-field",
        "wrong-type",
        "unknown-grid",
        "unknown-axis",
        "non-ascii",
        "axis-to-append",
        "close-match",
        "bool",
        "grid-twice",
        "open-bracket",
        "credentials-in-cfg-mode",
        "credentials-composed",
    ],
)
def test_each_hydra_error_is_one_line_naming_the_key_and_the_fix(argv, line, monkeypatch):
    monkeypatch.setenv("TOKENGEN_TEST_URI", f"https://me:{SECRET}@mlflow.lab")
    seen = command_line_problem(argv)
    assert seen is not None and seen.startswith(line), seen
    assert "\n" not in seen and SECRET not in seen


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["+grid=smoke", "trial.quant=int4"],
            "trial.quant=int4 is dropped: the grid's variant baseline sets every knob, quant=none among them: make it "
            "an axis, grid.quant=[int4] (an axis applies after the variant)",
        ),
        (
            ["+grid=smoke", "trial.batch_size=32"],  # the default, but given: the user meant it
            "trial.batch_size=32 is overridden by the grid axis grid.batch_size=[4]: put the value on the axis "
            "(grid.batch_size=[32]) or drop trial.batch_size",
        ),
        (
            ["+grid=smoke", "grid.variant=[kv_cache]", "++trial.variant=baseline"],
            "trial.variant=baseline is overridden by the grid axis grid.variant=[kv_cache]: put the value on the axis "
            "(grid.variant=[baseline]) or drop trial.variant",
        ),
    ],
    ids=["knob-under-variant-axis", "axis", "variant-axis"],
)
def test_a_setting_on_the_command_line_that_the_grid_overrides_is_one_line(argv, line):
    """Silently dropped before, each trial run without it; only the command line's own `trial.X=` is judged
    against the axes (a grid file's trial value that an axis narrows is what axes are for)."""
    assert command_line_problem(argv) == line


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--hydra-help"],
        ["-m", "trial.batch_size=1,2"],
        ["+grid=smoke"],
        ["+grid=smoke", "hydra.run.dir=/tmp/elsewhere", "grid.batch_size=[1]"],
    ],
    ids=["help", "hydra-help", "multirun", "plain", "hydra-override"],
)
def test_a_command_line_that_composes_and_hydras_own_modes_go_on_to_hydra(argv, tmp_path):
    assert command_line_problem(argv) is None
    assert command_line_problem(small_overrides(tmp_path)) is None


def driver(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweeps.run", *overrides],
        cwd=tmp_path,
        env=driver_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_refused_command_line_exits_2_with_one_line_on_stderr(capsys):
    with pytest.raises(SystemExit) as exited:
        refuse_bad_command_line(["+grid=smoke", "trial.batch_size=abc"])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "error: trial.batch_size='abc': give a whole number, e.g. trial.batch_size=32\n"
    refuse_bad_command_line(["+grid=smoke"])  # returns: hydra.main runs next


def test_the_driver_refuses_credentials_in_the_uri_before_hydra_writes_a_file(tmp_path):
    """`python -m sweeps.run` itself: exit 2, one line, the password in no file and no printed line."""
    proc = driver(tmp_path, *small_overrides(tmp_path), f"tracking.uri=http://user:{SECRET}@127.0.0.1:5000")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: tracking.uri carries credentials: use tracking.uri=http://127.0.0.1:5000 and put them in "
        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, which stay with the driver"
    ]
    assert SECRET not in proc.stdout + proc.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [p for p in written if SECRET.encode() in p.read_bytes()] == []
    assert list(tmp_path.iterdir()) == []  # refused before Hydra's outputs/.../.hydra/{config,hydra,overrides}.yaml


@pytest.mark.slow  # a multirun of real drivers
def test_multirun_runs_every_job_and_names_those_that_did_not_finish(tmp_path):
    """Two jobs the memory guard refuses (exit 2 each, before Ray): exiting in the first would leave the
    second unrun and unsaid."""
    proc = driver(tmp_path, "-m", *small_overrides(tmp_path), "grid.batch_size=[100000],[200000]", "trial.prompt_len=1")
    assert proc.returncode == 2, proc.stderr[-3000:]
    refused = [line for line in proc.stderr.splitlines() if line.startswith("error: trial ")]
    assert len(refused) == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("multirun: 2 of 2 job(s) did not finish: [") and "grid.batch_size=[200000]" in last, last
