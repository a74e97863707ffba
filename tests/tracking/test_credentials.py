"""A password never leaves the environment: any store URI that carries one (a server's, PostgreSQL's,
MySQL's) is refused in one line that names where the password goes instead, by the sweep's command
line before Hydra writes its run folder, by the driver (dry run included), the report, the comparison
and the UI; nothing is written and no printed line carries it. The sweep, report, comparison and UI
hint through a real basic-auth server, the password in the environment, are grepped in
tests/tracking/test_auth.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sweep_helpers import driver_environment, small_overrides, small_sweep

from sweeps.driver import run_sweep
from sweeps.planning.entry_errors import command_line_problem
from tracking import ui
from tracking.compare.__main__ import main as compare_main
from tracking.report.__main__ import main as report_main
from tracking.store.connect import TrackingError, check_credentials

SECRET = "pl4nted-Pa55"
URIS = {  # a URI with the password in it -> the start of the one line that refuses it
    "postgresql": (
        f"postgresql://bench:{SECRET}@db.lab:5432/mlflow",
        "tracking.uri carries a password: use tracking.uri=postgresql://bench@db.lab:5432/mlflow and put "
        "the password in PGPASSWORD or ~/.pgpass",
    ),
    "mysql": (
        f"mysql+pymysql://bench:{SECRET}@db.lab/mlflow",
        "tracking.uri carries a password: use tracking.uri=mysql+pymysql://bench@db.lab/mlflow and put the "
        "password in MYSQL_PWD",
    ),
    "http": (
        f"https://bench:{SECRET}@mlflow.lab",
        "tracking.uri carries credentials: use tracking.uri=https://mlflow.lab and put them in "
        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD",
    ),
}


@pytest.mark.parametrize("scheme", list(URIS))
def test_a_password_in_any_store_uri_is_refused_naming_where_it_goes(scheme):
    uri, line = URIS[scheme]
    with pytest.raises(TrackingError) as refused:
        check_credentials(uri)
    assert str(refused.value).startswith(line) and SECRET not in str(refused.value)
    assert command_line_problem(["+grid=smoke", f"tracking.uri={uri}"]).startswith(line)


def test_a_database_user_without_a_password_is_fine():
    check_credentials("postgresql://bench@db.lab/mlflow")  # libpq finds the password in PGPASSWORD or ~/.pgpass
    assert command_line_problem(["+grid=smoke", "tracking.uri=postgresql://bench@db.lab/mlflow"]) is None


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_the_driver_refuses_it_before_anything_is_written(tmp_path, monkeypatch, capsys, dry):
    """run_sweep called directly (a config from a file, a test, a notebook): refused before the dry run's
    plan files or the store, the journal and the sweep's log."""
    monkeypatch.chdir(tmp_path)
    config = small_sweep(tmp_path / "store", f"sweep.dry_run={str(dry).lower()}", seeded=False)
    config.tracking.uri = URIS["postgresql"][0]
    assert run_sweep(config) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + URIS["postgresql"][1]) and err.count("\n") == 1 and SECRET not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["report", "compare", "ui"])
def test_the_readers_refuse_it_and_write_nothing(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    uri = URIS["postgresql"][0]
    status = {
        "report": lambda: report_main(["--uri", uri]),
        "ui": lambda: ui.main(["--uri", uri, "--print-only"]),
        "compare": lambda: compare_main(["a", "b", "--uri", uri]),
    }[command]()
    assert status == 2
    out, err = capsys.readouterr()
    side = "A (a): " if command == "compare" else ""
    assert out == "" and err.startswith(
        f"error: {side}--uri carries a password: use --uri postgresql://bench@db.lab:"
        "5432/mlflow and put the password in PGPASSWORD or ~/.pgpass"
    )
    assert err.count("\n") == 1 and SECRET not in err
    assert list(tmp_path.iterdir()) == []


def test_the_sweeps_command_line_refuses_it_before_hydra_writes_a_file(tmp_path):
    """`python -m sweeps.run` itself: without the refusal Hydra writes the password into
    outputs/.../.hydra/{config,hydra,overrides}.yaml before the driver sees it."""
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps.run", *small_overrides(tmp_path), f"tracking.uri={URIS['postgresql'][0]}"],
        cwd=tmp_path,
        env=driver_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: " + URIS["postgresql"][1]) and proc.stderr.count("\n") == 1
    assert SECRET not in proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == []
