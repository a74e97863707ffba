"""A reader never harms a writer: a report, a comparison or a refused driver opening a SQLite store while a
driver writes it leaves the driver's `-wal` (and its results) in place; a store on read-only media, or one
whose writer was killed with its `-wal` full, reads whole; a copy is made through SQLite's backup API."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest
from disk_helpers import tmpfs

from tracking.store.backup import copy_store, main
from tracking.store.connect import TrackingError
from tracking.store.tables import Tables

CLOSE_ELSEWHERE = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT count(*) FROM sqlite_master').fetchone(); c.close()"
KILLED_WRITER = (  # rows committed to the -wal, then killed: no checkpoint, -wal and -shm left behind
    "import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA journal_mode=WAL'); "
    "c.execute('PRAGMA wal_autocheckpoint=0'); c.execute('CREATE TABLE experiments (experiment_id, name, "
    "lifecycle_stage)'); [c.execute('INSERT INTO experiments VALUES (?, ?, ?)', (i, f'e{i}', 'active')) "
    "for i in range(3)]; c.commit(); os._exit(0)"
)


def writer(path) -> sqlite3.Connection:
    """A driver's connection: WAL, its results in the -wal (no automatic checkpoint folds them into the file)."""
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA wal_autocheckpoint=0")
    connection.execute("CREATE TABLE experiments (experiment_id, name, lifecycle_stage)")
    connection.execute("INSERT INTO experiments VALUES (1, 'tokengen', 'active')")
    connection.commit()
    return connection


def test_a_reader_in_the_writers_process_keeps_the_writers_locks(tmp_path):
    """The driver's own read (Tables) and then another process's close: with the driver's locks dropped by a
    plain open() and close of the file, that close took itself for the last, checkpointed and unlinked the
    -wal under the live driver."""
    path = tmp_path / "mlflow.db"
    driver = writer(path)
    with Tables(f"sqlite:///{path}") as tables:
        assert tables.experiment_id("tokengen") == 1
    subprocess.run([sys.executable, "-c", CLOSE_ELSEWHERE, str(path)], check=True, timeout=60)
    assert (tmp_path / "mlflow.db-wal").is_file(), "another process's close removed the live driver's -wal"
    driver.execute("INSERT INTO experiments VALUES (2, 'later', 'active')")
    driver.commit()
    with Tables(f"sqlite:///{path}") as tables:
        assert tables.experiment_id("later") == 2
    driver.close()


@pytest.fixture
def killed_writers_store(tmp_path):
    """A store whose writer was killed: its rows only in the -wal."""
    path = tmp_path / "killed" / "mlflow.db"
    path.parent.mkdir()
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(path)], check=True, timeout=60)
    assert os.path.getsize(f"{path}-wal") > 0
    return path


def test_a_copy_holds_what_the_wal_holds(killed_writers_store, tmp_path):
    copy = tmp_path / "packed" / "mlflow.db"
    assert main(["--uri", f"sqlite:///{killed_writers_store}", str(copy)]) == 0
    assert not (tmp_path / "packed" / "mlflow.db-wal").exists()
    with Tables(f"sqlite:///{copy}") as tables:
        assert [tables.experiment_id(f"e{i}") for i in range(3)] == [0, 1, 2]
    with pytest.raises(TrackingError, match="exists: give a new path"):
        copy_store(f"sqlite:///{killed_writers_store}", copy)
    with pytest.raises(TrackingError, match="is not a SQLite store"):
        copy_store("postgresql://db/mlflow", tmp_path / "other.db")


def test_a_store_on_read_only_media_is_read_whole(killed_writers_store, tmp_path):
    """Read-only media: SQLite cannot make the -shm a WAL reader needs; the store still reads, -wal included."""
    disk = tmp_path / "disk"
    with tmpfs(disk, "8m"):
        for name in ("mlflow.db", "mlflow.db-wal"):
            (disk / name).write_bytes((killed_writers_store.parent / name).read_bytes())
        clean = disk / "clean.db"  # a store whose last writer closed it: no -wal
        writer(clean).close()
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
        if remounted.returncode:
            pytest.skip(f"cannot remount a tmpfs read-only here ({remounted.stderr.strip()})")
        with Tables(f"sqlite:///{disk / 'mlflow.db'}") as tables:
            assert [tables.experiment_id(f"e{i}") for i in range(3)] == [0, 1, 2]
        with Tables(f"sqlite:///{clean}") as tables:
            assert tables.experiment_id("tokengen") == 1
