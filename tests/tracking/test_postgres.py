"""PostgreSQL as the tracking store, for real (a server started by tests/postgres_helpers.py): a login
refused or a server down said in one line within seconds; the password from PGPASSWORD; a report on a database
without MLflow's tables said in one line, none made (for a user who may not make them too); sweeps, the
report, compare, the UI's link and the dry run's history on `tracking.uri=postgresql://...`; and
`mlflow server --backend-store-uri postgresql://...` serving a sweep. The killed-and-resumed driver on
PostgreSQL is tests/end_to_end/test_driver_killed.py's second case."""

from __future__ import annotations

import time

import pandas as pd
import pytest
from compare_helpers import recorded_comparison
from postgres_helpers import PASSWORD_ROLE, ROLE_PASSWORD, free_port
from servers import MlflowServer
from sweep_helpers import child_runs, run_captured, small_sweep

pytestmark = pytest.mark.slow  # a real PostgreSQL server


def refusal(uri: str) -> tuple[str, float]:
    """What opening the store for a sweep says, and how long it took to say it."""
    from tracking.store.connect import TrackingError
    from tracking.store.recorder import Recorder

    started = time.monotonic()
    with pytest.raises(TrackingError) as caught:
        Recorder(uri, "tokengen")
    return str(caught.value), time.monotonic() - started


def test_logins_refused_and_servers_down_are_one_line_within_seconds(postgres, monkeypatch, tmp_path, capsys):
    postgres.create_password_role()
    uri = postgres.create_database("logins", owner=PASSWORD_ROLE)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))  # only what the test sets
    monkeypatch.setenv("PGPASSWORD", "wrong")
    said, took = refusal(uri)
    assert (
        said
        == (
            f"PostgreSQL at 127.0.0.1:{postgres.port} refused user '{PASSWORD_ROLE}' (password authentication "
            "failed): set PGPASSWORD or a ~/.pgpass line (host:port:database:user:password)"
        )
        and took < 5
    )
    monkeypatch.delenv("PGPASSWORD")
    said, took = refusal(uri)
    assert said.startswith(f"PostgreSQL at 127.0.0.1:{postgres.port} wants a password for user '{PASSWORD_ROLE}'")
    port = free_port()
    said, took = refusal(f"postgresql://postgres@127.0.0.1:{port}/logins")
    assert said.startswith(f"PostgreSQL at 127.0.0.1:{port} is unreachable (Connection refused)") and took < 5
    assert said.endswith("start it or fix tracking.uri") and "\n" not in said
    said, _ = refusal(postgres.uri("nosuch"))
    assert said.endswith(
        f"has no database 'nosuch': create it (createdb -h 127.0.0.1 -p {postgres.port} -U postgres nosuch)"
    )

    from tracking.report.__main__ import main  # the report says it the same way, naming its own option

    monkeypatch.setenv("PGPASSWORD", "wrong")
    assert main(["--uri", uri, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "password authentication failed" in err[0]

    from tracking.store.history import load_history
    from tracking.store.recorder import Recorder

    monkeypatch.setenv("PGPASSWORD", ROLE_PASSWORD)  # the right one, from libpq's environment: no password in a URI
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("p", {}, resume=False)
    assert load_history(uri, "tokengen").frame.empty


def test_a_report_on_a_database_without_mlflow_tables_makes_none_and_prints_one_line(postgres, tmp_path, capfd):
    """MLflow makes its tables as its client opens a database that lacks them, printing "Creating initial MLflow
    database tables" first, and fails after that line where the user may not create tables: the report says "no
    sweep" in one line before MLflow is asked, for that user and for the owner, and the database stays empty."""
    import psycopg

    from tracking.report.__main__ import main

    owner = postgres.create_database("no_tables")
    reader = "tokengen_reader"  # may not create tables (PostgreSQL 15 grants it no CREATE; older ones are told)
    postgres.execute(f"CREATE ROLE {reader} LOGIN", "REVOKE CREATE ON SCHEMA public FROM PUBLIC", database="no_tables")
    for uri in (postgres.uri("no_tables", reader), owner):
        capfd.readouterr()
        assert main(["--uri", uri, "--out", str(tmp_path)]) == 2
        assert capfd.readouterr().err.splitlines() == [
            f"error: no sweep in {uri} experiment 'tokengen' (its database has no MLflow tables): run python -m "
            "sweeps.run +grid=smoke first"
        ]
    with psycopg.connect(owner) as connection:
        assert connection.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)


def test_sweeps_report_compare_ui_and_history_on_postgres(postgres, tmp_path, capsys, warm_ray):
    uri = postgres.create_database("sweeps")
    for name, cpus in (("t1", 1), ("t2", 2)):
        config = small_sweep(tmp_path, f"tracking.uri={uri}", f"sweep.cpus_per_trial={cpus}", name=name)
        status, out, err = run_captured(config, tmp_path)
        assert status == 0, err[-2000:]
        assert "| kv_cache |" in out and f"--backend-store-uri {uri}" in err  # its report, and how to open the UI
    capsys.readouterr()

    from tracking.report.build import build_report

    report = build_report(uri, "tokengen", "t1", tmp_path / "again")
    assert (report.sweep, report.trials, report.failed) == ("t1", 2, 0)
    assert "| ok |" in (report.directory / "report.md").read_text().split("## (a)")[1]

    from tracking.compare.__main__ import main as compare

    assert compare(["t1", "t2", "--uri", uri, "--out", str(tmp_path / "compared")]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("What differs: threads 1 vs 2")
    rows = pd.read_csv(tmp_path / "compared" / "t1-vs-t2" / "comparison.csv")
    assert sorted(rows["variant"]) == ["baseline", "kv_cache"] and set(rows["tokens"]) == {"same"}
    compared = recorded_comparison(uri, "t1 vs t2")  # one run through MLflow's API, none per point
    assert compared.data.metrics["points"] == 2 and compared.data.metrics["points/kv_cache"] == 1

    from tracking.ui import main as ui

    assert ui(["--uri", uri, "--sweep", "t2", "--print-only"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("http://127.0.0.1:5000/#/experiments/") and "viewStateShareKey=tokengen-" in out
    assert f"mlflow server --backend-store-uri {uri} " in err

    from tracking.store.history import load_history

    history = load_history(uri, "tokengen")  # what the dry run prices from and resume skips
    assert len(history.frame) == 4 and len(history.finished_keys) == 2 and "searched" in history.source


def test_rows_are_written_by_sql_only_into_a_tested_schema(postgres):
    """tracking/store/tables.py's gate on PostgreSQL's `alembic_version` (tests/tracking/test_schema_gate.py has
    SQLite's, and both write paths)."""
    import psycopg

    from tracking.store.postgres import libpq_uri
    from tracking.store.recorder import Recorder
    from tracking.store.tables import Tables, UntestedSchema, writes_in_bulk

    uri = postgres.create_database("gate")
    Recorder(uri, "tokengen")  # MLflow makes its tables
    assert writes_in_bulk(uri)
    with Tables(uri, write=True) as tables:
        tables.commit()
    with psycopg.connect(libpq_uri(uri)) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'feedfacecafe'")
    assert not writes_in_bulk(uri)
    with pytest.raises(UntestedSchema, match="feedfacecafe"):
        Tables(uri, write=True)


def test_a_tracking_server_on_postgres_takes_a_sweep(postgres, tmp_path, warm_ray):
    """`mlflow server --backend-store-uri postgresql://...`, the cluster's server (docs/cluster.md): the sweep
    and its report go through it, and its runs are in PostgreSQL."""
    backend = postgres.create_database("served")
    server = MlflowServer(tmp_path / "server", backend=backend).start()
    try:
        status, _, err = run_captured(small_sweep(tmp_path, f"tracking.uri={server.url}"), tmp_path)
        assert status == 0, err[-2000:]
        assert "ui: the tracking server serves the MLflow UI" in err
    finally:
        server.stop()
    runs = child_runs(backend)  # read from the database itself, the server gone
    assert sorted(r.data.tags["variant"] for r in runs) == ["baseline", "kv_cache"]
    assert all(r.data.tags["status"] == "finished" and "speedup" in r.data.metrics for r in runs)
    assert list((tmp_path / "server" / "art").rglob("tokens.npy"))  # artifacts under --artifacts-destination
