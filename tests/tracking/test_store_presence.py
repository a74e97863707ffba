"""A store is never made by a check or a reader: MLflow makes what its client opens (a file store's .trash in any
folder it is given, file:///etc included, and its default experiment in a new one; a database's tables, printing
"Creating initial MLflow database tables"), so the sweep refuses a folder of other files before MLflow touches it,
its dry run leaves a file store not made yet unmade, and the report says "no sweep" in one line on a store with no
MLflow store in it, before MLflow prints or makes anything. PostgreSQL's own case (a user who may not create
tables) is tests/tracking/test_postgres.py's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import ray
from sweep_helpers import small_sweep

from sweeps.driver import run_sweep
from tracking.report.__main__ import main as report_main
from tracking.store.history import load_history


@pytest.fixture
def file_store(tmp_path, monkeypatch):
    """MLflow's file store allowed, and a folder of other files, as /etc is."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    folder = tmp_path / "etc"
    folder.mkdir()
    (folder / "passwd").write_text("root:x:0:0\n")
    return folder


def one_error_line(capfd) -> str:
    """The one line a refused command wrote (MLflow's own log lines go to the process's stderr: capfd sees them)."""
    out, err = capfd.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_a_folder_of_other_files_is_refused_before_mlflow_puts_trash_in_it(file_store, tmp_path, capfd, dry):
    config = small_sweep(tmp_path, f"tracking.uri=file://{file_store}", f"sweep.dry_run={str(dry).lower()}")
    assert run_sweep(config) == 2
    assert one_error_line(capfd) == (
        f"error: tracking.uri=file://{file_store} is a folder of other files, not MLflow's file store (no .trash "
        "in it): give a new or empty folder, or use tracking.uri=sqlite:///mlflow.db"
    )
    assert sorted(p.name for p in file_store.iterdir()) == ["passwd"] and not ray.is_initialized()


def test_the_report_makes_no_file_store(file_store, tmp_path, capfd):
    """On a folder of other files, and on one that is not there yet: "no sweep", and neither is touched."""
    for folder in (file_store, tmp_path / "new"):
        assert report_main(["--uri", f"file://{folder}", "--out", str(tmp_path / "reports")]) == 2
        assert one_error_line(capfd) == (
            f"error: no sweep in file://{folder} experiment 'tokengen' (no MLflow file store in {folder}): "
            "run python -m sweeps.run +grid=smoke first"
        )
    assert sorted(p.name for p in file_store.iterdir()) == ["passwd"] and not (tmp_path / "new").exists()


def test_the_history_leaves_a_file_store_not_made_yet_unmade(file_store, tmp_path):
    """The dry run (and every sweep) prices from the store's history before anything else, and the dry run says it
    wrote nothing to the store: MLflow's client would have made the folder, its .trash and a default experiment
    as it opened it."""
    new = tmp_path / "new"
    history = load_history(f"file://{new}", "tokengen")
    assert history.frame.empty and history.missing and not new.exists()


def test_the_report_on_a_database_without_mlflow_tables_makes_none(tmp_path, capfd):
    """A SQLite file of someone else's tables: MLflow would add its own to it (and print so) as its client opened
    it; the report says "no sweep" in one line and leaves the file as it was."""
    database = tmp_path / "other.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
    assert report_main(["--uri", f"sqlite:///{database}", "--out", str(tmp_path / "reports")]) == 2
    assert one_error_line(capfd) == (
        f"error: no sweep in sqlite:///{database} experiment 'tokengen' (its database has no MLflow tables): "
        "run python -m sweeps.run +grid=smoke first"
    )
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]
    assert not Path(tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())
