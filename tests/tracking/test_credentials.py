"""A secret never leaves the environment: any store URI that carries one, in its userinfo or its query
(`?password=`, `passfile=`, any parameter whose name holds pass, secret or token; a server's, PostgreSQL's,
MySQL's, any scheme) is refused in one line that names the variable it goes in instead, by the sweep's command
line before Hydra writes its run folder, by the driver (dry run included), the report, the comparison
and the UI; nothing is written and no printed line carries it; the variables that hold them reach no Ray
process and no trial (tests/end_to_end/test_sweep_local.py: test_secrets_stay_with_the_driver). The sweep, report, comparison and UI
hint through a real basic-auth server, the password in the environment, are grepped in
tests/tracking/test_auth.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sweep_helpers import driver_environment, small_overrides, small_sweep

from sweeps.driver import run_sweep
from sweeps.planning.entry_errors import command_line_problem
from tokengen.contract.machine.process_env import trial_environment
from tracking import ui
from tracking.compare.__main__ import main as compare_main
from tracking.report.__main__ import main as report_main
from tracking.store.connect import TrackingError, check_credentials, redacted

SECRET = "pl4nted-Pa55"
WHERE = "postgresql-query"  # the sweep's own command line is run once, on a password in a URI's query
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
    "postgresql-query": (
        f"postgresql://db.lab:5432/mlflow?sslmode=require&password={SECRET}",
        "tracking.uri carries a secret in its query (password=...): use tracking.uri=postgresql://db.lab:5432/"
        "mlflow?sslmode=require and put it in PGPASSWORD or ~/.pgpass (libpq reads both), which stays out of every "
        "file and printed line",
    ),
    "postgresql-passfile": (
        f"postgresql://db.lab/mlflow?passfile=/home/bench/{SECRET}",
        "tracking.uri carries a secret in its query (passfile=...): use tracking.uri=postgresql://db.lab/mlflow and "
        "put it in PGPASSFILE",
    ),
    "mysql-query": (
        f"mysql+pymysql://bench@db.lab/mlflow?Password={SECRET}",
        "tracking.uri carries a secret in its query (Password=...): use tracking.uri=mysql+pymysql://bench@db.lab/"
        "mlflow and put it in MYSQL_PWD",
    ),
    "http-token": (
        f"https://mlflow.lab/?token={SECRET}",
        "tracking.uri carries a secret in its query (token=...): use tracking.uri=https://mlflow.lab/ and put it in "
        "MLFLOW_TRACKING_TOKEN, which stays with the driver",
    ),
    "mssql-secret": (
        f"mssql+pyodbc://bench@db.lab/mlflow?driver=odbc18&client_secret={SECRET}",
        "tracking.uri carries a secret in its query (client_secret=...): use tracking.uri=mssql+pyodbc://bench@"
        "db.lab/mlflow?driver=odbc18 and put it in a DSN",
    ),
    "sqlite-token": (
        f"sqlite:///mlflow.db?auth_token={SECRET}",
        "tracking.uri carries a secret in its query (auth_token=...): use tracking.uri=sqlite:///mlflow.db and put it",
    ),
    "both-places": (
        f"postgresql://bench:{SECRET}@db.lab/mlflow?password={SECRET}",
        "tracking.uri carries a password: use tracking.uri=postgresql://bench@db.lab/mlflow and put the password in "
        "PGPASSWORD",
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
    check_credentials("postgresql://bench@db.lab/mlflow?sslmode=require&connect_timeout=3")  # no secret in its query
    assert command_line_problem(["+grid=smoke", "tracking.uri=postgresql://bench@db.lab/mlflow"]) is None


def test_a_printed_uri_carries_no_user_password_or_secret_parameter():
    assert redacted(f"postgresql://bench:{SECRET}@db.lab/m?sslmode=require&sslpassword={SECRET}") == (
        "postgresql://db.lab/m?sslmode=require"
    )
    assert redacted("sqlite:///mlflow.db") == "sqlite:///mlflow.db"


def test_the_stores_secrets_stay_out_of_a_trials_environment():
    """Each store's variable by name (libpq's, MySQL's, MLflow's): a trial never talks to the store."""
    named = ("PGPASSWORD", "PGPASSFILE", "MYSQL_PWD", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
    env = trial_environment({"PATH": "/bin", **dict.fromkeys(named, SECRET)}, "default")
    assert env["PATH"] == "/bin" and SECRET not in env.values()


@pytest.mark.parametrize("where", ["postgresql", "postgresql-query"])
@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_the_driver_refuses_it_before_anything_is_written(tmp_path, monkeypatch, capsys, dry, where):
    """run_sweep called directly (a config from a file, a test, a notebook): refused before the dry run's
    plan files (plan.md, sweep_config.json) or the store, the journal and the sweep's log."""
    monkeypatch.chdir(tmp_path)
    config = small_sweep(tmp_path / "store", f"sweep.dry_run={str(dry).lower()}", seeded=False)
    config.tracking.uri = URIS[where][0]
    assert run_sweep(config) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + URIS[where][1]) and err.count("\n") == 1 and SECRET not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["postgresql", "postgresql-query"])
@pytest.mark.parametrize("command", ["report", "compare", "ui"])
def test_the_readers_refuse_it_and_write_nothing(tmp_path, monkeypatch, capsys, command, where):
    monkeypatch.chdir(tmp_path)
    uri = URIS[where][0]
    status = {
        "report": lambda: report_main(["--uri", uri]),
        "ui": lambda: ui.main(["--uri", uri, "--print-only"]),
        "compare": lambda: compare_main(["a", "b", "--uri", uri]),
    }[command]()
    assert status == 2
    out, err = capsys.readouterr()
    side = "A (a): " if command == "compare" else ""
    line = URIS[where][1].replace("tracking.uri=", "--uri ").replace("tracking.uri", "--uri")
    assert out == "" and err.startswith(f"error: {side}{line}")
    assert err.count("\n") == 1 and SECRET not in err
    assert list(tmp_path.iterdir()) == []


def test_the_sweeps_command_line_refuses_it_before_hydra_writes_a_file(tmp_path):
    """`python -m sweeps.run` itself, on a URI with no user and its password in its query (a userinfo's password
    takes the same door, command_line_problem, above): without the refusal Hydra writes the password into
    outputs/.../.hydra/{config,hydra,overrides}.yaml before the driver sees it."""
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps.run", *small_overrides(tmp_path), f"tracking.uri={URIS[WHERE][0]}"],
        cwd=tmp_path,
        env=driver_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: " + URIS[WHERE][1]) and proc.stderr.count("\n") == 1
    assert SECRET not in proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == []
